//! Debezium connector configuration import (placeholder, being written).
