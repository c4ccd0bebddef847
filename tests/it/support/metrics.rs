//! Reading the gateway's Prometheus exposition (`Gateway::metrics`).

use std::collections::BTreeMap;

/// One sample of a Prometheus text exposition, matched on the exact label set.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (series_name, label_text) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if series_name != name {
            continue;
        }
        let mut found = BTreeMap::new();
        for pair in split_labels(label_text) {
            if let Some((k, v)) = pair.split_once('=') {
                found.insert(k.to_string(), v.trim_matches('"').to_string());
            }
        }
        if found == wanted {
            return value.parse().ok();
        }
    }
    None
}

/// Splits `a="x",b="y,z"` on the commas between labels.
fn split_labels(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            ',' if !quoted => out.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}
