//! `hookline rollout compare ID`: a rollout's comparison, read from the API, as a table. Its
//! verdict is the exit code: 1 when the candidate ends significantly more deliveries dead than
//! the baseline (promoting it would lose deliveries the baseline keeps).

use anyhow::anyhow;
use serde_json::Value;

use super::client::document;
use super::table;
use super::{ApiArg, Output};

pub async fn compare(id: &str, api: &ApiArg, output: Output) -> anyhow::Result<()> {
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if id.is_empty() || !id.chars().all(plain) {
        return Err(super::usage(format!("{id:?} is not a rollout id (ro_...)")));
    }
    let answer = document(&api.client()?.compare_rollout(id).await?);
    output.print(&answer, render);
    match against(&answer) {
        Some(by) => Err(anyhow!(
            "AGAINST: the candidate's terminal rate is {by:.4} higher than the baseline's, \
             significant at 95%: it gives up where the baseline delivers"
        )),
        None => Ok(()),
    }
}

/// How much higher the candidate's terminal rate is, when that is significant: the one
/// difference that says not to promote (a higher retry rate is the cost a candidate may be
/// worth; the reader weighs it).
fn against(comparison: &Value) -> Option<f64> {
    let terminal = &comparison["difference"]["terminal_rate"];
    let higher = terminal["difference"].as_f64().filter(|d| *d > 0.0)?;
    (terminal["significant"] == true).then_some(higher)
}

/// A number as the table shows it: rates to four places, `-` where there is none.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::Number(n) if n.is_f64() => format!("{:.4}", n.as_f64().unwrap_or_default()),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        other => other.to_string().trim_matches('"').to_owned(),
    }
}

fn render(c: &Value) -> String {
    let (b, k, d) = (&c["baseline"], &c["candidate"], &c["difference"]);
    let row = |name: &str, pick: &dyn Fn(&Value) -> &Value, diff: Option<&Value>| {
        vec![
            name.to_owned(),
            cell(pick(b)),
            cell(pick(k)),
            diff.map_or(String::new(), |d| cell(&d["difference"])),
            diff.map_or(String::new(), |d| cell(&d["significant"])),
        ]
    };
    let mut rows = vec![
        row("subscribers", &|s| &s["subscribers"], None),
        row("deliveries", &|s| &s["deliveries"], None),
        row(
            "first attempt p50 ms",
            &|s| &s["first_attempt_latency_ms"]["p50"],
            None,
        ),
        row(
            "first attempt p99 ms",
            &|s| &s["first_attempt_latency_ms"]["p99"],
            None,
        ),
        row("retry rate", &|s| &s["retry_rate"], Some(&d["retry_rate"])),
        row(
            "terminal rate",
            &|s| &s["terminal_rate"],
            Some(&d["terminal_rate"]),
        ),
        row("delivered", &|s| &s["delivered"], None),
        row("dead", &|s| &s["dead"], None),
    ];
    let mut reasons: Vec<&String> = [b, k]
        .iter()
        .filter_map(|s| s["dead_by_reason"].as_object())
        .flat_map(|m| m.keys())
        .collect();
    reasons.sort();
    reasons.dedup();
    for reason in reasons {
        rows.push(row(
            &format!("  dead {reason}"),
            &|s| s["dead_by_reason"].get(reason).unwrap_or(&Value::Null),
            None,
        ));
    }
    let header = format!(
        "rollout {} ({}), {} to {}\n\n",
        cell(&c["rollout"]),
        cell(&c["state"]),
        cell(&c["since"]),
        cell(&c["until"])
    );
    let baseline = format!("baseline {}", cell(&b["policy"]));
    let candidate = format!("candidate {}", cell(&k["policy"]));
    header
        + &table::render(
            &["", &baseline, &candidate, "difference", "significant (95%)"],
            &rows,
        )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_comparison_prints_side_by_side() {
        let side = |policy: &str, dead: u64, rate: f64| {
            json!({"policy": policy, "subscribers": 20, "deliveries": 40,
                   "first_attempt_latency_ms": {"p50": 3, "p99": 9}, "retry_rate": rate,
                   "terminal_rate": 1.0, "delivered": 0, "dead": dead,
                   "dead_by_reason": {"permanent_failure": dead}})
        };
        let text = super::render(&json!({
            "rollout": "ro_1", "state": "running", "since": "a", "until": "b",
            "baseline": side("default", 40, 0.0), "candidate": side("cf", 40, 3.0),
            "difference": {"retry_rate": {"difference": 3.0, "significant": true},
                           "terminal_rate": {"difference": 0.0, "significant": false}},
        }));
        assert!(text.contains("baseline default"), "{text}");
        let retry = text.lines().find(|l| l.starts_with("retry rate")).unwrap();
        assert_eq!(
            retry.split_whitespace().collect::<Vec<_>>(),
            ["retry", "rate", "0.0000", "3.0000", "3.0000", "yes"]
        );
        assert!(text.contains("dead permanent_failure"), "{text}");
    }

    /// Against only when the candidate's terminal rate is higher and significantly so.
    #[test]
    fn a_significantly_higher_terminal_rate_is_a_verdict_against() {
        let with = |difference: f64, significant: bool| {
            json!({"difference": {"terminal_rate":
                {"difference": difference, "significant": significant}}})
        };
        assert_eq!(super::against(&with(0.25, true)), Some(0.25));
        assert_eq!(super::against(&with(0.25, false)), None);
        assert_eq!(super::against(&with(-0.25, true)), None);
        assert_eq!(super::against(&json!({})), None);
    }
}
