//! The tunable sections (`[work]`, `[dns]`, `[tcp]`, `[overload]`, `[audit]`): their
//! defaults, the values as written, and each refusal naming its field.

use super::super::*;
use super::{load, GOOD};

/// `[work]` (R-ST-2, R-ST-3): defaults when absent, values as written, and
/// a zero refused with the field named.
#[test]
fn work_section() {
    let c = load(GOOD).unwrap();
    assert_eq!(c.work, WorkConfig::default());
    assert_eq!(
        c.work.blind_window(),
        std::time::Duration::from_secs(43_200)
    );
    let text =
        format!("{GOOD}\n[work]\nmax_expires_s = 7200\nmax_call_age_s = 3600\nmax_calls = 10\n");
    let c = load(&text).unwrap();
    assert_eq!(
        (
            c.work.max_expires_s,
            c.work.max_call_age_s,
            c.work.max_calls
        ),
        (7200, 3600, 10)
    );
    assert_eq!(c.work.blind_window(), std::time::Duration::from_secs(7200));
    assert_eq!(
        c.work.max_registrations, 1_000_000,
        "others keep their default"
    );
    let e = load(&format!("{GOOD}\n[work]\nmax_subscriptions = 0\n")).unwrap_err();
    assert_eq!(e.field, "work.max_subscriptions", "{e}");
    assert!(e.to_string().contains("must be positive"), "{e}");
    let e = load(&format!("{GOOD}\n[work]\nmax_expiry_s = 10\n")).unwrap_err();
    assert!(e.to_string().contains("max_expiry_s"), "{e}");
}

#[test]
fn dns_section_defaults_values_and_errors() {
    let c = load(GOOD).unwrap();
    assert_eq!(c.dns, DnsConfig::default());
    assert!(c.dns.nameservers.is_empty(), "the system's resolv.conf");
    let text = format!(
        "{GOOD}\n[dns]\nnameservers = [\"127.0.0.53:5353\"]\ntimeout_ms = 300\nattempts = 1\n\
         cache_size = 16\nnegative_ttl_s = 5\nfailover_hold_s = 2\n"
    );
    let c = load(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(c.dns.nameservers, vec!["127.0.0.53:5353".parse().unwrap()]);
    assert_eq!((c.dns.timeout_ms, c.dns.attempts), (300, 1));
    assert_eq!(
        (
            c.dns.cache_size,
            c.dns.negative_ttl_s,
            c.dns.failover_hold_s
        ),
        (16, 5, 2)
    );
    for (bad, field) in [
        ("timeout_ms = 0", "dns.timeout_ms"),
        ("attempts = 0", "dns.attempts"),
        ("cache_size = 0", "dns.cache_size"),
    ] {
        let e = load(&format!("{GOOD}\n[dns]\n{bad}\n")).unwrap_err();
        assert_eq!(e.field, field, "{e}");
    }
    let e = load(&format!(
        "{GOOD}\n[dns]\nnameservers = [\"not an address\"]\n"
    ))
    .unwrap_err();
    assert!(
        e.line.is_some() && e.to_string().contains("socket address"),
        "{e}"
    );
}

#[test]
fn tcp_section_defaults_values_and_errors() {
    let c = load(GOOD).unwrap();
    assert_eq!(c.tcp, TcpConfig::default());
    assert_eq!(
        (c.tcp.max_connections, c.tcp.idle_s, c.tcp.frame_s),
        (16_384, 600, 10)
    );
    let c = load(&format!(
        "{GOOD}\n[tcp]\nmax_connections = 64\nidle_s = 30\nframe_s = 2\n"
    ))
    .unwrap();
    assert_eq!((c.tcp.max_connections, c.tcp.idle_s), (64, 30));
    assert_eq!(c.tcp.frame(), std::time::Duration::from_secs(2));
    assert_eq!(c.tcp.idle(), std::time::Duration::from_secs(30));
    for (bad, field) in [
        ("max_connections = 0", "tcp.max_connections"),
        ("idle_s = 0", "tcp.idle_s"),
        ("frame_s = 0", "tcp.frame_s"),
    ] {
        let e = load(&format!("{GOOD}\n[tcp]\n{bad}\n")).unwrap_err();
        assert_eq!(e.field, field, "{e}");
    }
    assert!(
        load(&format!("{GOOD}\n[tcp]\nidle = 3\n")).is_err(),
        "unknown key"
    );
}

#[test]
fn overload_section_defaults_values_and_errors() {
    let c = load(GOOD).unwrap();
    assert_eq!(c.overload, OverloadConfig::default());
    let d = &c.overload;
    assert_eq!((d.per_source_rate, d.per_source_burst), (50, 100));
    assert_eq!((d.per_account_rate, d.per_account_burst), (200, 400));
    // R-OV-1 for REGISTER: its own capacity and per-source allowance.
    assert_eq!((d.registers_per_s, d.registers_burst), (5_000, 10_000));
    assert_eq!(
        (d.per_source_register_rate, d.per_source_register_burst),
        (200, 400)
    );
    assert_eq!((d.max_sources, d.max_transactions), (65_536, 1 << 20));
    assert_eq!(d.tcp_queue_messages, 1024);
    assert_eq!(d.udp_workers, None, "automatic unless set");
    assert_eq!((d.udp_workers_max, d.udp_worker_busy_percent), (None, 75));
    assert_eq!(d.action, LimitAction::Reject);
    let c = load(&format!(
        "{GOOD}\n[overload]\nper_source_rate = 5\nper_source_burst = 2\naction = \"drop\"\nnew_dialog_deadline_ms = 50\nnew_dialogs_per_s = 0\nnew_dialogs_burst = 0\ntcp_queue_messages = 64\nudp_workers = 1\nregisters_per_s = 0\nregisters_burst = 0\nper_source_register_rate = 90\nper_source_register_burst = 9\n"
    ))
    .unwrap();
    let o = &c.overload;
    assert_eq!((o.per_source_rate, o.per_source_burst), (5, 2));
    assert_eq!(o.action, LimitAction::Drop);
    assert_eq!(o.tcp_queue_messages, 64);
    assert_eq!(o.udp_workers, Some(1));
    let c = load(&format!(
        "{GOOD}\n[overload]\nudp_workers_max = 4\nudp_worker_busy_percent = 20\n"
    ))
    .unwrap();
    assert_eq!(
        (c.overload.udp_workers, c.overload.udp_workers_max),
        (None, Some(4))
    );
    assert_eq!(c.overload.udp_worker_busy_percent, 20);
    assert_eq!(
        o.new_dialog_deadline(),
        std::time::Duration::from_millis(50)
    );
    assert_eq!(o.new_dialogs_per_s, 0, "a rate of 0 turns the limit off");
    assert_eq!(o.registers_per_s, 0, "a rate of 0 turns the limit off");
    assert_eq!(
        (o.per_source_register_rate, o.per_source_register_burst),
        (90, 9)
    );
    for (bad, field) in [
        ("max_sources = 0", "overload.max_sources"),
        ("max_transactions = 0", "overload.max_transactions"),
        ("tcp_queue_messages = 0", "overload.tcp_queue_messages"),
        (
            "new_dialog_deadline_ms = 0",
            "overload.new_dialog_deadline_ms",
        ),
        ("retry_after_s = 0", "overload.retry_after_s"),
        ("udp_rcvbuf_bytes = 1000", "overload.udp_rcvbuf_bytes"),
        ("udp_workers = 0", "overload.udp_workers"),
        ("udp_workers = 65", "overload.udp_workers"),
        ("udp_workers_max = 0", "overload.udp_workers_max"),
        ("udp_workers_max = 65", "overload.udp_workers_max"),
        (
            "udp_workers = 2\nudp_workers_max = 4",
            "overload.udp_workers_max",
        ),
        (
            "udp_worker_busy_percent = 0",
            "overload.udp_worker_busy_percent",
        ),
        (
            "udp_worker_busy_percent = 100",
            "overload.udp_worker_busy_percent",
        ),
        ("per_source_burst = 0", "overload.per_source_burst"),
        ("per_account_burst = 0", "overload.per_account_burst"),
        ("new_dialogs_burst = 0", "overload.new_dialogs_burst"),
        ("registers_burst = 0", "overload.registers_burst"),
        (
            "per_source_register_burst = 0",
            "overload.per_source_register_burst",
        ),
    ] {
        let e = load(&format!("{GOOD}\n[overload]\n{bad}\n")).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(e.line.is_some(), "{e}");
    }
    for bad in ["action = \"ignore\"", "per_source = 3", "max_sources = -1"] {
        let e = load(&format!("{GOOD}\n[overload]\n{bad}\n")).unwrap_err();
        assert!(e.line.is_some(), "{bad}: {e}");
    }
}

/// `[audit]`: the rotation's defaults, values, and each refusal naming its
/// field.
#[test]
fn audit_section_defaults_values_and_errors() {
    let c = load(GOOD).unwrap();
    assert_eq!((c.audit.max_bytes, c.audit.keep), (64 << 20, 8));
    let c = load(&format!("{GOOD}\n[audit]\nmax_bytes = 0\nkeep = 2\n")).unwrap();
    assert_eq!((c.audit.max_bytes, c.audit.keep), (0, 2));
    for (bad, field) in [
        ("max_bytes = 10", "audit.max_bytes"),
        ("keep = 0", "audit.keep"),
    ] {
        let e = load(&format!("{GOOD}\n[audit]\n{bad}\n")).unwrap_err();
        assert_eq!(e.field, field, "{e}");
    }
    let e = load(&format!("{GOOD}\n[audit]\nmax_size = 10\n")).unwrap_err();
    assert!(e.to_string().contains("max_size"), "{e}");
}
