//! Drop-in for Debezium users: pgoutbox's records against golden records that
//! Debezium 3.6.3 produced for the same rows (`tests/fixtures/debezium/`, generated
//! by `tools/debezium-golden/generate.py`; no JVM needed here).
//!
//! - [`fixtures`]: loading the goldens, importing their connector configuration
//!   with `config import-debezium`, and encoding the same rows through pgoutbox;
//! - [`golden`]: byte comparisons per configuration — topic, partition, key, value,
//!   headers — with every remaining difference asserted by name;
//! - [`relay`]: the relay itself against tansu with an imported configuration,
//!   read back by a consumer.

pub(crate) mod fixtures;
mod golden;
mod relay;
