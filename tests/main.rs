//! The integration tests: one binary, so the harness ([`support`]) is compiled once
//! and every test shares its PostgreSQL cluster ([`support::PgCluster::shared`]) and
//! tansu broker ([`support::kafka::Broker::shared`]). A module per area; a test that
//! needs a server of its own (other settings, TLS files, stops and restarts) starts
//! one with [`support::PgCluster::start`].
//!
//! Tests of different modules run concurrently in this one process, so each test
//! keeps to its own database, slot, topics and state directory, and never counts
//! anything cluster-wide. Run one area with `cargo test --test main auth::`.

mod support;

mod apache_kafka;
mod auth;
mod capture_seeds;
mod cleanup;
mod cli;
mod cluster;
mod column_types;
mod config;
mod debezium;
mod edges;
mod equivalence;
mod exactly_once;
mod failover;
mod failover_slots;
mod faults;
mod first_writes;
mod heartbeat;
mod in_flight_window;
mod keepalive;
mod layouts;
mod logs;
mod messages;
mod migrations;
mod mock_kafka;
mod network;
mod ops;
mod packaging;
mod poison;
mod poll;
mod reader;
mod repair;
mod replay;
mod restart;
mod rounds;
mod run;
mod security;
mod slot_safety;
mod sql_helpers;
mod stall;
mod tail;
mod tls;
mod tls_auth;
mod unmapped;
mod wal_linger;
