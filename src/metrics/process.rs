//! The standard `process_*` metrics of the Prometheus client libraries, read from
//! `/proc/self` at each scrape: CPU seconds, resident and virtual memory, open and
//! maximum file descriptors, start time; and one of ours beside them,
//! `pgoutbox_resident_memory_peak_bytes` (`VmHWM`: the highest resident size the
//! process ever had, which a scrape every 15 s would miss between two readings).
//!
//! Invariants: a file that cannot be read or parsed leaves its metrics out of the
//! scrape instead of reporting a made-up value (nothing at all on systems without
//! `/proc`); parsing is pure over the file texts, so it is tested without a kernel.
//! Clock ticks are `USER_HZ`, which Linux fixes at 100 for `/proc` on every
//! architecture it runs userspace on (the Go client's procfs makes the same choice).
//! See <https://prometheus.io/docs/instrumenting/writing_clientlibs/#process-metrics>
//! and `proc_pid_stat(5)`.

use std::fmt::Write as _;

/// `/proc` reports CPU and start times in these ticks per second.
const USER_HZ: f64 = 100.0;

/// One reading of the process.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Sample {
    /// User + system CPU time, seconds.
    cpu_seconds: Option<f64>,
    /// Resident set size, bytes.
    resident_bytes: Option<u64>,
    /// Its peak so far (`VmHWM`), bytes.
    resident_peak_bytes: Option<u64>,
    /// Virtual memory size, bytes.
    virtual_bytes: Option<u64>,
    /// Open file descriptors.
    open_fds: Option<u64>,
    /// The soft limit on open file descriptors.
    max_fds: Option<u64>,
    /// Start time, seconds since the Unix epoch.
    start_time_seconds: Option<f64>,
}

/// Fields of `/proc/self/stat` this module uses.
#[derive(Debug, PartialEq)]
struct Stat {
    cpu_ticks: u64,
    start_ticks: u64,
    virtual_bytes: u64,
}

impl Sample {
    /// Read the running process.
    pub(super) fn read() -> Sample {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let stat = read("/proc/self/stat").and_then(|t| parse_stat(&t));
        let boot_time = read("/proc/stat").and_then(|t| parse_boot_time(&t));
        let status = read("/proc/self/status");
        Sample {
            cpu_seconds: stat.as_ref().map(|s| s.cpu_ticks as f64 / USER_HZ),
            resident_bytes: status.as_deref().and_then(|t| parse_kb(t, "VmRSS:")),
            resident_peak_bytes: status.as_deref().and_then(|t| parse_kb(t, "VmHWM:")),
            virtual_bytes: stat.as_ref().map(|s| s.virtual_bytes),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|dir| dir.count() as u64),
            max_fds: read("/proc/self/limits").and_then(|t| parse_max_fds(&t)),
            start_time_seconds: stat
                .zip(boot_time)
                .map(|(s, boot)| boot as f64 + s.start_ticks as f64 / USER_HZ),
        }
    }

    /// Append the Prometheus text exposition of what was read.
    pub(super) fn render(&self, out: &mut String) {
        let mut metric = |name: &str, kind: &str, help: &str, value: Option<String>| {
            if let Some(v) = value {
                let _ = writeln!(
                    out,
                    "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
                );
            }
        };
        let text = |v: Option<u64>| v.map(|v| v.to_string());
        let float = |v: Option<f64>| v.map(|v| v.to_string());
        metric(
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            float(self.cpu_seconds),
        );
        metric(
            super::RESIDENT_MEMORY,
            "gauge",
            "Resident memory size in bytes.",
            text(self.resident_bytes),
        );
        metric(
            super::RESIDENT_MEMORY_PEAK,
            "gauge",
            "Peak resident memory size (VmHWM) since the process started, in bytes.",
            text(self.resident_peak_bytes),
        );
        metric(
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            text(self.virtual_bytes),
        );
        metric(
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            text(self.open_fds),
        );
        metric(
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            text(self.max_fds),
        );
        metric(
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            float(self.start_time_seconds),
        );
    }
}

#[cfg(test)]
impl Sample {
    /// Every metric read, with known values (the exposition's golden test).
    pub(super) fn known() -> Sample {
        Sample {
            cpu_seconds: Some(12.34),
            resident_bytes: Some(18_874_368),
            resident_peak_bytes: Some(25_165_824),
            virtual_bytes: Some(104_857_600),
            open_fds: Some(17),
            max_fds: Some(1024),
            start_time_seconds: Some(1_700_000_000.5),
        }
    }
}

/// `/proc/self/stat`: the command name (field 2) is in parentheses and may itself
/// hold spaces and `)`, so fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state); utime is field 14, stime 15, starttime 22,
    // vsize 23.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        cpu_ticks: field(14)?.checked_add(field(15)?)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
    })
}

/// `btime` of `/proc/stat`: boot time, seconds since the epoch.
fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// A size field of `/proc/self/status` (`VmRSS:`, `VmHWM:`), in kB there, as bytes.
fn parse_kb(text: &str, field: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix(field))?;
    let kb: u64 = line.split_whitespace().next()?.parse().ok()?;
    kb.checked_mul(1024)
}

/// The soft limit of "Max open files" in `/proc/self/limits`.
fn parse_max_fds(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // A command name with a space and a ")" (field 2), then fields 3 to 24.
        let text = "4242 (pg out) box) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                    250 50 0 0 20 0 9 0 12345 104857600 2048";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                cpu_ticks: 300,
                start_ticks: 12345,
                virtual_bytes: 104_857_600,
            })
        );
        assert_eq!(parse_stat("4242 (cut short) S 1"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn status_limits_and_boot_time() {
        let status =
            "Name:\tpgoutbox\nVmSize:\t  102400 kB\nVmHWM:\t   24576 kB\nVmRSS:\t   18432 kB\n";
        assert_eq!(parse_kb(status, "VmRSS:"), Some(18_432 * 1024));
        assert_eq!(parse_kb(status, "VmHWM:"), Some(24_576 * 1024));
        assert_eq!(parse_kb("Name:\tx\n", "VmRSS:"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(parse_max_fds(limits), Some(1024));
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn renders_only_what_was_read() {
        let sample = Sample {
            cpu_seconds: Some(3.0),
            open_fds: Some(12),
            ..Sample::default()
        };
        let mut out = String::new();
        sample.render(&mut out);
        assert!(
            out.contains("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n"),
            "{out}"
        );
        assert!(out.contains("process_open_fds 12\n"), "{out}");
        assert!(!out.contains("process_max_fds"), "{out}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process() {
        let s = Sample::read();
        assert!(s.cpu_seconds.is_some_and(|c| c >= 0.0), "{s:?}");
        assert!(s.resident_bytes.is_some_and(|r| r > 0), "{s:?}");
        assert!(
            s.resident_peak_bytes
                .zip(s.resident_bytes)
                .is_some_and(|(peak, now)| peak >= now),
            "{s:?}"
        );
        assert!(s.open_fds.is_some_and(|n| n >= 3), "{s:?}");
        assert!(s.max_fds.is_some_and(|n| n > 0), "{s:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        // Started before now, and not before 2020.
        assert!(
            s.start_time_seconds
                .is_some_and(|t| t <= now + 1.0 && t > 1_577_836_800.0),
            "{s:?}"
        );
    }
}
