//! The metric names a PromQL expression reads, and the sample names a `/metrics` exposition
//! holds: for checking that dashboards and alerts name only metrics the controller exports.
//!
//! Not a PromQL parser: a tokenizer that is right for the expressions of
//! `deploy/monitoring/` (promtool checks their syntax). It drops string literals, label
//! matchers `{...}`, ranges and subqueries `[...]`, and the label lists after `by`, `without`,
//! `on`, `ignoring`, `group_left` and `group_right`; of the identifiers left, those followed by
//! `(` are functions, the keywords and aggregation operators are skipped, numbers and
//! durations (`5m`, `1e3`) and Grafana variables (`$pod`, `$__rate_interval`) too; every
//! other identifier is a metric name, exactly as it is selected (`..._bucket`, `..._total`).
use std::collections::BTreeSet;

const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "atan2",
    "inf",
    "nan",
    // Aggregation operators, which may take `by (...)` before their parenthesis.
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// Keywords followed by a parenthesized list of label names.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

fn ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The metric names `expr` selects, in order of first appearance.
pub fn metric_names(expr: &str) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names: Vec<String> = Vec::new();
    let mut i = 0;
    // After a keyword that takes a label list, the next `(...)` is one.
    let mut label_list_next = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => i = skip_string(&chars, i),
            '{' => i = skip_balanced(&chars, i, '{', '}'),
            '[' => i = skip_balanced(&chars, i, '[', ']'),
            '(' if label_list_next => {
                label_list_next = false;
                i = skip_balanced(&chars, i, '(', ')');
            }
            '$' => {
                i += 1;
                while i < chars.len() && ident_char(chars[i]) {
                    i += 1;
                }
            }
            c if c.is_ascii_digit()
                || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                // A number or a duration: digits, letters, dots, exponents.
                while i < chars.len() && (ident_char(chars[i]) || chars[i] == '.') {
                    i += 1;
                }
            }
            c if ident_start(c) => {
                let start = i;
                while i < chars.len() && ident_char(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                if LABEL_LISTS.contains(&word.as_str()) {
                    label_list_next = chars.get(next) == Some(&'(');
                } else if KEYWORDS.contains(&word.as_str()) || chars.get(next) == Some(&'(') {
                    // A keyword, or a function call.
                } else if !names.contains(&word) {
                    names.push(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

fn skip_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() && chars[i] != quote {
        if chars[i] == '\\' && quote != '`' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

fn skip_balanced(chars: &[char], start: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => {
                i = skip_string(chars, i);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// The PromQL inside a Grafana template variable's query: the first argument of
/// `label_values(<expr>, <label>)` or of `query_result(<expr>)`; none for
/// `label_values(<label>)` and the other forms.
pub fn template_query(query: &str) -> Option<String> {
    let query = query.trim();
    if let Some(inner) = query
        .strip_prefix("query_result(")
        .and_then(|q| q.strip_suffix(')'))
    {
        return Some(inner.to_owned());
    }
    let inner = query.strip_prefix("label_values(")?.strip_suffix(')')?;
    // The last comma outside braces and parentheses separates the label.
    let mut depth = 0_i32;
    let mut split = None;
    for (i, c) in inner.char_indices() {
        match c {
            '{' | '(' | '[' => depth += 1,
            '}' | ')' | ']' => depth -= 1,
            ',' if depth == 0 => split = Some(i),
            _ => {}
        }
    }
    split.map(|i| inner[..i].to_owned())
}

/// The sample names of an exposition (`# EOF`, `# HELP` and `# TYPE` lines left out): what
/// Prometheus stores and queries select, `_total`, `_bucket`, `_sum`, `_count` included.
pub fn sample_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// `# TYPE <family> <type>` lines: family name to type.
pub fn families(exposition: &str) -> std::collections::BTreeMap<String, String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| {
            let (name, kind) = l.split_once(' ')?;
            Some((name.to_owned(), kind.to_owned()))
        })
        .collect()
}

/// Why `name` is not a sample name of the exposition, if it is close to one: a family named
/// without the suffix its samples carry.
pub fn hint(name: &str, families: &std::collections::BTreeMap<String, String>) -> String {
    match families.get(name).map(String::as_str) {
        Some("counter") => format!("{name} is a counter: its samples are {name}_total"),
        Some("histogram") => {
            format!("{name} is a histogram: its samples are {name}_bucket, _sum and _count")
        }
        Some(kind) => format!("{name} is a {kind} without samples yet"),
        None => "no such family".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_selected_metrics_only() {
        assert_eq!(
            metric_names(
                r#"histogram_quantile(0.99, sum by (plugin, le) (rate(a_bucket{result!="ok", x=~"$pod"}[$__rate_interval])))"#
            ),
            ["a_bucket"]
        );
        assert_eq!(
            metric_names(
                "sum(b * on (namespace, pod) group_left c) / sum without(x)(rate(d_total[5m] offset 1h)) > 0.1"
            ),
            ["b", "c", "d_total"]
        );
        assert_eq!(
            metric_names(r#"absent(up{job=~".*by (x)"} == 1) or vector(0) and time() - e > 1e3"#),
            ["up", "e"]
        );
        assert_eq!(
            metric_names("count by (reason) (f) unless max(g) bool > 2"),
            ["f", "g"]
        );
        assert_eq!(metric_names("rate(h[5m:30s]) * 100 + .5 - 0x1F"), ["h"]);
    }

    #[test]
    fn template_queries_give_their_expression() {
        assert_eq!(
            template_query(r#"label_values(a{namespace=~"$ns", x=","}, pod)"#).as_deref(),
            Some(r#"a{namespace=~"$ns", x=","}"#)
        );
        assert_eq!(template_query("label_values(pod)"), None);
        assert_eq!(
            template_query("query_result(max(b))").as_deref(),
            Some("max(b)")
        );
    }

    #[test]
    fn samples_carry_their_suffixes() {
        let text = "# TYPE a counter\na_total{x=\"1\"} 2\n# TYPE b histogram\nb_bucket{le=\"1\"} 0\nb_sum 0\nb_count 0\n# TYPE c gauge\nc 1\n# EOF\n";
        assert_eq!(
            sample_names(text).into_iter().collect::<Vec<_>>(),
            ["a_total", "b_bucket", "b_count", "b_sum", "c"]
        );
        let families = families(text);
        assert!(hint("a", &families).contains("a_total"));
        assert!(hint("b", &families).contains("histogram"));
    }
}
