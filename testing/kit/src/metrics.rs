//! One reader of the Prometheus text format for every test and benchmark. A series is named
//! `name` or `name{label="value",...}`: it matches the series of metric `name` whose labels
//! include those given. A series that is not there fails the test, showing what was: a
//! missing series never reads as 0.

/// One scrape of `/metrics` (or of an encoded registry).
#[derive(Debug, Clone)]
pub struct Scrape {
    text: String,
}

impl Scrape {
    pub fn new(text: impl Into<String>) -> Self {
        Scrape { text: text.into() }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// The value of the first series matching `series`; fails when there is none.
    pub fn value(&self, series: &str) -> f64 {
        self.get(series)
            .unwrap_or_else(|| panic!("no series {series} in:\n{}", self.text))
    }

    /// The value of the first series matching `series`, if there is one.
    pub fn get(&self, series: &str) -> Option<f64> {
        self.matching(series).next()
    }

    /// The sum over every series matching `series`; fails when there is none.
    pub fn sum(&self, series: &str) -> f64 {
        let mut values = self.matching(series).peekable();
        assert!(
            values.peek().is_some(),
            "no series {series} in:\n{}",
            self.text
        );
        values.sum()
    }

    /// The values of the series matching `series`, in the order of the text.
    fn matching<'a>(&'a self, series: &'a str) -> impl Iterator<Item = f64> + 'a {
        let wanted = Series::parse(series);
        self.text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(move |line| {
                let (series, value) = line.rsplit_once(' ')?;
                let found = Series::parse(series);
                (found.name == wanted.name
                    && wanted.labels.iter().all(|l| found.labels.contains(l)))
                .then(|| value.parse().ok())
                .flatten()
            })
    }
}

/// A series as written: its metric's name and its `label="value"` pairs.
struct Series<'a> {
    name: &'a str,
    labels: Vec<&'a str>,
}

impl<'a> Series<'a> {
    fn parse(text: &'a str) -> Self {
        match text.split_once('{') {
            None => Series {
                name: text.trim(),
                labels: Vec::new(),
            },
            Some((name, rest)) => Series {
                name,
                labels: split_labels(rest.trim_end_matches('}')),
            },
        }
    }
}

/// `a="x",b="y,z"` as `a="x"` and `b="y,z"`: commas inside quotes stay.
fn split_labels(text: &str) -> Vec<&str> {
    let (mut labels, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                labels.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    labels.push(&text[start..]);
    labels.retain(|l| !l.is_empty());
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP nad_reconciles_total Reconciles.
# TYPE nad_reconciles_total counter
nad_reconciles_total{result=\"ok\"} 7
nad_reconciles_total{result=\"error\",why=\"a,b\"} 2
nad_reconciles_total_bucket{le=\"1\"} 99
nad_leader 1
";

    #[test]
    fn a_series_is_found_by_its_name_and_some_of_its_labels() {
        let scrape = Scrape::new(TEXT);
        assert_eq!(scrape.value("nad_leader"), 1.0);
        assert_eq!(scrape.value("nad_reconciles_total{result=\"error\"}"), 2.0);
        assert_eq!(scrape.value("nad_reconciles_total{why=\"a,b\"}"), 2.0);
        assert_eq!(scrape.value("nad_reconciles_total"), 7.0, "the first");
        assert_eq!(scrape.sum("nad_reconciles_total"), 9.0, "not the _bucket");
        assert_eq!(scrape.get("nad_reconciles_total{result=\"gone\"}"), None);
        assert_eq!(
            scrape.get("nad_reconciles"),
            None,
            "a prefix is not the metric"
        );
    }

    #[test]
    #[should_panic(expected = "no series nad_missing")]
    fn a_missing_series_fails_instead_of_reading_zero() {
        Scrape::new(TEXT).value("nad_missing");
    }

    #[test]
    #[should_panic(expected = "no series nad_missing_total")]
    fn a_sum_over_nothing_fails_too() {
        Scrape::new(TEXT).sum("nad_missing_total");
    }
}
