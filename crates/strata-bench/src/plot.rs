//! Charts of a comparison, drawn as SVG: one group of bars per workload, one bar per engine,
//! each bar the engine's median throughput over that of the fastest engine on the workload.

use std::path::Path;

use plotters::prelude::*;

const COLOURS: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// Draws `medians[engine][workload]` (ops/sec) into `file`.
pub fn bars(
    file: &Path,
    title: &str,
    engines: &[&str],
    workloads: &[String],
    medians: &[Vec<f64>],
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", file.display());
    let width = (140 + 135 * workloads.len() as u32).max(640);
    let root = SVGBackend::new(file, (width, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let n = workloads.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(60)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..n as f64, 0f64..1.5f64)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 1e-6 {
                workloads.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_label_style(("sans-serif", 12))
        .y_desc("throughput / fastest engine's")
        .draw()
        .map_err(|e| err(&e))?;
    let width_each = 0.8 / engines.len().max(1) as f64;
    for (ei, engine) in engines.iter().enumerate() {
        let colour = COLOURS[ei % COLOURS.len()];
        let bars = workloads.iter().enumerate().map(|(wi, _)| {
            let best = medians.iter().map(|m| m[wi]).fold(0f64, f64::max).max(1e-9);
            let x0 = wi as f64 + 0.1 + ei as f64 * width_each;
            let y = medians[ei][wi] / best;
            Rectangle::new([(x0, 0.0), (x0 + width_each * 0.9, y)], colour.filled())
        });
        chart
            .draw_series(bars)
            .map_err(|e| err(&e))?
            .label(*engine)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// One line of a line chart.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// An axis: its description and whether it is logarithmic.
pub struct Axis {
    pub desc: String,
    pub log: bool,
}

impl Axis {
    pub fn linear(desc: &str) -> Self {
        Axis {
            desc: desc.into(),
            log: false,
        }
    }
    pub fn log(desc: &str) -> Self {
        Axis {
            desc: desc.into(),
            log: true,
        }
    }
    fn map(&self, v: f64) -> f64 {
        if self.log { v.max(1e-12).log10() } else { v }
    }
    /// The drawn range for the values: from zero on a linear axis, whole decades on a log one.
    fn range(&self, values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
        let (mut lo, mut hi) = (f64::MAX, f64::MIN);
        for v in values.filter(|v| v.is_finite() && (!self.log || *v > 0.0)) {
            lo = lo.min(self.map(v));
            hi = hi.max(self.map(v));
        }
        if lo > hi {
            return 0.0..1.0;
        }
        if self.log {
            let (lo, hi) = (lo.floor(), hi.ceil());
            lo..hi.max(lo + 1.0)
        } else {
            lo.min(0.0)..(hi * 1.1).max(1e-9)
        }
    }
    fn label(&self, v: f64) -> String {
        let v = if self.log { 10f64.powf(v) } else { v };
        short_number(v)
    }
}

/// 1500000 as `1.5M`, 0.25 as `0.25`.
fn short_number(v: f64) -> String {
    let a = v.abs();
    let (x, unit) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let digits = if x.abs() >= 100.0 || x.fract().abs() < 1e-9 {
        0
    } else if x.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{x:.digits$}{unit}")
}

/// One chart of a figure.
pub struct Panel {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
}

/// Draws the panels into `file`, `columns` to a row, each line in the same colour in every
/// panel (by its name), with a point at each measurement.
pub fn lines(file: &Path, title: &str, panels: &[Panel], columns: usize) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", file.display());
    let columns = columns.clamp(1, panels.len().max(1));
    let rows = panels.len().div_ceil(columns).max(1);
    let size = (440 * columns as u32, 60 + 330 * rows as u32);
    let root = SVGBackend::new(file, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(title, ("sans-serif", 18))
        .map_err(|e| err(&e))?;
    let mut names: Vec<&str> = Vec::new();
    for s in panels.iter().flat_map(|p| &p.series) {
        if !names.contains(&s.name.as_str()) {
            names.push(&s.name);
        }
    }
    let colour = |name: &str| {
        let i = names.iter().position(|n| *n == name).unwrap_or(0);
        COLOURS[i % COLOURS.len()]
    };
    for (panel, area) in panels.iter().zip(root.split_evenly((rows, columns))) {
        let points = || panel.series.iter().flat_map(|s| s.points.iter());
        let xr = panel.x.range(points().map(|p| p.0));
        let yr = panel.y.range(points().map(|p| p.1));
        // A log axis is labelled at whole decades only.
        let ticks = |axis: &Axis, r: &std::ops::Range<f64>| match axis.log {
            true => (r.end - r.start).round() as usize + 1,
            false => 8,
        };
        let (xt, yt) = (ticks(&panel.x, &xr), ticks(&panel.y, &yr));
        let mut chart = ChartBuilder::on(&area)
            .caption(&panel.title, ("sans-serif", 14))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(xr, yr)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_labels(xt)
            .y_labels(yt)
            .x_desc(panel.x.desc.as_str())
            .y_desc(panel.y.desc.as_str())
            .x_label_formatter(&|v| panel.x.label(*v))
            .y_label_formatter(&|v| panel.y.label(*v))
            .label_style(("sans-serif", 11))
            .draw()
            .map_err(|e| err(&e))?;
        for s in &panel.series {
            let c = colour(&s.name);
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|p| !panel.x.log || p.0 > 0.0)
                .filter(|p| !panel.y.log || p.1 > 0.0)
                .map(|&(x, y)| (panel.x.map(x), panel.y.map(y)))
                .collect();
            if pts.len() < s.points.len() {
                eprintln!(
                    "{}: {} of {}'s points in {:?} are zero or less, left off its log axis",
                    file.display(),
                    s.points.len() - pts.len(),
                    s.name,
                    panel.title
                );
            }
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 14, y)], c.stroke_width(2))
                });
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))
                .map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(("sans-serif", 11))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
