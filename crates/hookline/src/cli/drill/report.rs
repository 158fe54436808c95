//! The drill's numbers: latencies from publish to first receipt, split by cohort, summarised
//! as percentiles for the report and its table.

use std::collections::HashMap;

use hookline_testkit::percentile;
use serde_json::{json, Value};

use super::phases::{Cohort, Subscriber};

pub fn summary(mut v: Vec<f64>) -> Value {
    v.sort_by(f64::total_cmp);
    json!({"n": v.len(), "p50_ms": percentile(&v, 0.5).unwrap_or(0.0), "p95_ms": percentile(&v, 0.95).unwrap_or(0.0), "p99_ms": percentile(&v, 0.99).unwrap_or(0.0)})
}

/// Latencies (ms) from publish to first receipt: of the healthy cohort, and of the others.
pub fn latencies(
    events: &[(String, i64)],
    receipts: &HashMap<String, i64>,
    subs: &[Subscriber],
    points: &mut Vec<Value>,
    phase: &str,
) -> (Vec<f64>, Vec<f64>) {
    let (mut healthy, mut unhealthy) = (Vec::new(), Vec::new());
    for (event, at) in events {
        for sub in subs {
            if let Some(got) = receipts.get(&format!("{event}:{}", sub.id)) {
                let ms = (got - at) as f64;
                let bad = sub.cohort != Cohort::Good;
                points
                    .push(json!({"phase": phase, "at_ms": got, "latency_ms": ms, "healthy": !bad}));
                if bad {
                    unhealthy.push(ms)
                } else {
                    healthy.push(ms)
                }
            }
        }
    }
    (healthy, unhealthy)
}

pub fn row(phase: &str, who: &str, s: &Value) -> Vec<String> {
    let f = |k: &str| format!("{:.0}", s[k].as_f64().unwrap_or(0.0));
    vec![
        phase.into(),
        who.into(),
        s["n"].to_string(),
        f("p50_ms"),
        f("p95_ms"),
        f("p99_ms"),
    ]
}
