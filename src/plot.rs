//! Plots as standalone SVG: lines of points on a log₁₀ value axis, against a log₂ axis
//! (kernel error against dimension) or a linear index axis (an eigenvalue spectrum), with
//! optional dashed marks. The one place that draws; the drivers only hand it series.

use std::fmt::Write as _;

/// How the horizontal axis is scaled and labelled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum XAxis {
    /// `log₂ x`, ticks at powers of two.
    Log2,
    /// `x` itself (indices from 0), five ticks labelled from 1.
    Index,
}

/// One line: its name, its points `(x, y > 0)` and an optional dashed mark at `x`.
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// The legend text.
    pub name: String,
    /// Points; non-positive `y` are left out (the value axis is logarithmic).
    pub points: Vec<(f64, f64)>,
    /// A vertical dashed line at this `x` (the components kept).
    pub mark: Option<f64>,
    /// Dots at the points.
    pub dots: bool,
}

/// A chart: a title, axis labels, the horizontal scale, the series.
#[derive(Debug, Clone)]
pub struct Chart {
    /// The title.
    pub title: String,
    /// The horizontal axis label.
    pub x_label: String,
    /// The vertical axis label.
    pub y_label: String,
    /// The horizontal scale.
    pub x_axis: XAxis,
    /// The lines.
    pub series: Vec<Series>,
    /// The fewest decades the value axis shows below its top (spectra span many).
    pub max_decades: f64,
}

const COLORS: [&str; 7] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"];
const W: f64 = 640.0;
const H: f64 = 420.0;
const M: f64 = 60.0;

impl Chart {
    /// The chart as an SVG document.
    pub fn svg(&self) -> String {
        let sx = |x: f64| if self.x_axis == XAxis::Log2 { x.log2() } else { x };
        let pts: Vec<(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().filter(|p| p.1 > 0.0).map(|&(x, y)| (sx(x), y.log10())))
            .collect();
        let bound = |f: fn(f64, f64) -> f64, start: f64, v: &mut dyn Iterator<Item = f64>| v.fold(start, f);
        let (mut x0, mut x1) = (
            bound(f64::min, f64::MAX, &mut pts.iter().map(|p| p.0)),
            bound(f64::max, f64::MIN, &mut pts.iter().map(|p| p.0)),
        );
        let (mut y0, mut y1) = (
            bound(f64::min, f64::MAX, &mut pts.iter().map(|p| p.1)),
            bound(f64::max, f64::MIN, &mut pts.iter().map(|p| p.1)),
        );
        if pts.is_empty() {
            (x0, x1, y0, y1) = (0.0, 1.0, -1.0, 0.0);
        }
        if self.x_axis == XAxis::Index {
            x0 = 0.0;
        }
        let y1 = y1.ceil();
        let y0 = y0.floor().max(y1 - self.max_decades);
        let y1 = y1.max(y0 + 1.0);
        let x1 = x1.max(x0 + 1.0);
        let px = |x: f64| M + (x - x0) / (x1 - x0) * (W - 2.0 * M);
        let py = |y: f64| H - M - (y.max(y0) - y0) / (y1 - y0) * (H - 2.0 * M);
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
            W / 2.0,
            self.title
        );
        let _ = writeln!(s, "<line x1=\"{M}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>", H - M, W - M, H - M);
        let _ = writeln!(s, "<line x1=\"{M}\" y1=\"{M}\" x2=\"{M}\" y2=\"{}\" stroke=\"black\"/>", H - M);
        match self.x_axis {
            XAxis::Log2 => {
                let mut t = x0.ceil() as i64;
                while (t as f64) <= x1 {
                    let label = 1u64 << t.clamp(0, 62);
                    let _ = writeln!(
                        s,
                        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{label}</text>",
                        px(t as f64),
                        H - M + 18.0
                    );
                    t += 1;
                }
            }
            XAxis::Index => {
                for t in 0..=4 {
                    let i = x0 + (x1 - x0) * f64::from(t) / 4.0;
                    let label = i.round() as u64 + 1;
                    let _ = writeln!(
                        s,
                        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{label}</text>",
                        px(i),
                        H - M + 18.0
                    );
                }
            }
        }
        let mut t = y0 as i64;
        while (t as f64) <= y1 {
            let _ =
                writeln!(s, "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">1e{t}</text>", M - 6.0, py(t as f64) + 4.0);
            t += 1;
        }
        let _ =
            writeln!(s, "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", W / 2.0, H - 15.0, self.x_label);
        let _ = writeln!(
            s,
            "<text x=\"15\" y=\"{}\" transform=\"rotate(-90 15 {})\" text-anchor=\"middle\">{}</text>",
            H / 2.0,
            H / 2.0,
            self.y_label
        );
        for (k, series) in self.series.iter().enumerate() {
            let c = COLORS[k % COLORS.len()];
            let line: Vec<(f64, f64)> =
                series.points.iter().filter(|p| p.1 > 0.0).map(|&(x, y)| (px(sx(x)), py(y.log10()))).collect();
            let text: Vec<String> = line.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
            let _ = writeln!(
                s,
                "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>",
                text.join(" ")
            );
            if series.dots {
                for (a, b) in &line {
                    let _ = writeln!(s, "<circle cx=\"{a:.1}\" cy=\"{b:.1}\" r=\"3\" fill=\"{c}\"/>");
                }
            }
            if let Some(x) = series.mark {
                let x = px(sx(x));
                let _ = writeln!(
                    s,
                    "<line x1=\"{x:.1}\" y1=\"{M}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"{c}\" stroke-dasharray=\"4 3\"/>",
                    H - M
                );
            }
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{}\" fill=\"{c}\">{}</text>",
                W - M - 170.0,
                M + 16.0 * k as f64,
                series.name
            );
        }
        s += "</svg>\n";
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_draws_one_polyline_per_series_and_leaves_out_non_positive_values() {
        let chart = Chart {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            x_axis: XAxis::Log2,
            series: vec![
                Series {
                    name: "a".into(),
                    points: vec![(64.0, 0.5), (128.0, 0.25), (256.0, 0.0)],
                    mark: None,
                    dots: true,
                },
                Series { name: "b".into(), points: vec![(64.0, 0.1)], mark: Some(128.0), dots: false },
            ],
            max_decades: 16.0,
        };
        let svg = chart.svg();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 2);
        assert_eq!(svg.matches("stroke-dasharray").count(), 1);
        assert!(svg.contains(">128<") && svg.contains(">1e0<"));
        let empty = Chart { series: Vec::new(), ..chart }.svg();
        assert!(empty.contains("</svg>"));
    }
}
