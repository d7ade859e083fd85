//! Charts of a comparison, drawn as SVG: one group of bars per workload, one bar per engine,
//! each bar the engine's median throughput over that of the fastest engine on the workload.

use std::path::Path;

use plotters::prelude::*;

const COLOURS: [RGBColor; 5] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
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
