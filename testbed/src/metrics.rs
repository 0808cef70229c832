//! One `/metrics` sample of a node, in Prometheus' text format, read the
//! same way by every test, benchmark and the rehearsal.

/// A scraped `/metrics` body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    text: String,
}

impl Metrics {
    /// A sample from its text.
    pub fn new(text: impl Into<String>) -> Metrics {
        Metrics { text: text.into() }
    }

    /// The text as served.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Every sample line: the series (name and labels as printed) and its
    /// value; comments and lines whose value is not a number are skipped.
    pub fn series(&self) -> impl Iterator<Item = (&str, f64)> {
        series(&self.text)
    }

    /// The value of the series printed exactly as `series`
    /// (`name{label="v",...}`, labels in the order the exporter prints
    /// them); `None` when it is absent.
    pub fn value(&self, series: &str) -> Option<f64> {
        self.series().find(|(s, _)| *s == series).map(|(_, v)| v)
    }

    /// [`Self::value`], with an absent series read as 0: a counter or gauge
    /// the node has not touched yet.
    pub fn count(&self, series: &str) -> f64 {
        self.value(series).unwrap_or(0.0)
    }

    /// The sum over every series of metric `name` whose labels include all
    /// of `labels` (each `key="value"`).
    pub fn sum(&self, name: &str, labels: &[&str]) -> f64 {
        self.series()
            .filter(|(s, _)| {
                let (n, rest) = s.split_once('{').unwrap_or((s, ""));
                n == name && labels.iter().all(|l| rest.contains(l))
            })
            .map(|(_, v)| v)
            .sum()
    }

    /// The sum over every series of metric `name` (any labels), `None`
    /// when it has none: a metric that is not exported at all.
    pub fn total(&self, name: &str) -> Option<f64> {
        self.series()
            .filter(|(s, _)| self::name(s) == name)
            .map(|(_, v)| v)
            .reduce(|a, b| a + b)
    }
}

/// [`Metrics::series`] of a text the caller holds: its results borrow
/// from `text`.
pub fn series(text: &str) -> impl Iterator<Item = (&str, f64)> {
    text.lines().filter_map(|l| {
        if l.starts_with('#') {
            return None;
        }
        let (series, value) = l.rsplit_once(' ')?;
        Some((series.trim(), value.trim().parse().ok()?))
    })
}

/// The metric name of a series as printed (`name{...}` or `name`).
pub fn name(series: &str) -> &str {
    series.split_once('{').map_or(series, |(n, _)| n)
}

/// The value of label `key` in a series as printed
/// (`name{key="value",...}`), quotes off; `None` when it has none.
pub fn label<'a>(series: &'a str, key: &str) -> Option<&'a str> {
    let (_, labels) = series.split_once('{')?;
    labels
        .trim_end_matches('}')
        .split(',')
        .find_map(|kv| kv.trim().strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.trim_matches('"'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# TYPE sipgate_requests_total counter\n\
        sipgate_requests_total{method=\"INVITE\",outcome=\"forwarded\"} 7\n\
        sipgate_requests_total{method=\"BYE\",outcome=\"forwarded\"} 3\n\
        sipgate_requests_total_other{method=\"INVITE\"} 100\n\
        sipgate_phase{phase=\"serving\"} 1\n\
        sipgate_tcp_connections 0\n";

    #[test]
    fn a_series_is_found_exactly_and_an_absent_one_counts_zero() {
        let m = Metrics::new(SAMPLE);
        assert_eq!(m.value("sipgate_phase{phase=\"serving\"}"), Some(1.0));
        assert_eq!(m.value("sipgate_tcp_connections"), Some(0.0));
        assert_eq!(m.value("sipgate_phase{phase=\"stopping\"}"), None);
        assert_eq!(m.count("sipgate_phase{phase=\"stopping\"}"), 0.0);
    }

    #[test]
    fn a_sum_takes_the_metric_by_its_whole_name_and_every_label_asked() {
        let m = Metrics::new(SAMPLE);
        assert_eq!(m.sum("sipgate_requests_total", &[]), 10.0);
        assert_eq!(m.sum("sipgate_requests_total", &["method=\"INVITE\""]), 7.0);
        assert_eq!(m.sum("sipgate_tcp_connections", &[]), 0.0);
    }

    #[test]
    fn a_label_is_read_by_its_whole_key_and_a_name_without_its_labels() {
        let s = "sipgate_requests_total{method=\"INVITE\",outcome=\"forwarded\"}";
        assert_eq!(name(s), "sipgate_requests_total");
        assert_eq!(name("sipgate_tcp_connections"), "sipgate_tcp_connections");
        assert_eq!(label(s, "method"), Some("INVITE"));
        assert_eq!(label(s, "outcome"), Some("forwarded"));
        assert_eq!(label(s, "out"), None);
        assert_eq!(label("sipgate_tcp_connections", "method"), None);
    }

    #[test]
    fn a_total_is_none_only_for_a_metric_not_exported() {
        let m = Metrics::new(SAMPLE);
        assert_eq!(m.total("sipgate_requests_total"), Some(10.0));
        assert_eq!(m.total("sipgate_tcp_connections"), Some(0.0));
        assert_eq!(m.total("sipgate_requests"), None);
        assert_eq!(m.total("absent"), None);
    }
}
