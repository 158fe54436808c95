//! The drill's chart: first-attempt latency over time, healthy subscribers green, unavailable
//! ones red, as a self-contained SVG.

use serde_json::Value;

pub fn svg(points: &[Value], start: i64) -> String {
    let (w, h, pad) = (900.0, 400.0, 50.0);
    let max_t = points
        .iter()
        .filter_map(|p| p["at_ms"].as_i64())
        .max()
        .unwrap_or(start + 1)
        - start;
    let max_l = points
        .iter()
        .filter_map(|p| p["latency_ms"].as_f64())
        .fold(1.0, f64::max);
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{pad}" y="20">hookline drill: first-attempt latency over time (green healthy, red unavailable)</text><line x1="{pad}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{pad}" y1="{pad}" x2="{pad}" y2="{}" stroke="black"/><text x="{pad}" y="{}">0 s</text><text x="{}" y="{}">{:.0} s</text><text x="5" y="{}">0</text><text x="5" y="{}">{:.0} ms</text>"#,
        h - pad,
        w - pad,
        h - pad,
        h - pad,
        h - pad + 15.0,
        w - pad - 30.0,
        h - pad + 15.0,
        max_t as f64 / 1000.0,
        h - pad,
        pad,
        max_l
    );
    for p in points {
        let (Some(t), Some(l)) = (p["at_ms"].as_i64(), p["latency_ms"].as_f64()) else {
            continue;
        };
        let x = pad + (t - start) as f64 / max_t.max(1) as f64 * (w - 2.0 * pad);
        let y = h - pad - l / max_l * (h - 2.0 * pad);
        let color = if p["healthy"].as_bool() == Some(true) {
            "#2a2"
        } else {
            "#d22"
        };
        out += &format!(r#"<circle cx="{x:.1}" cy="{y:.1}" r="1.5" fill="{color}"/>"#);
    }
    out + "</svg>\n"
}
