//! The chart of a run (plotters): new calls per second per sg/esg with the
//! drain windows shaded and the other steps marked, calls failed over to
//! another gate as a black line and Active-Passive handovers as triangles;
//! the mg weights on a second panel. SVG and PNG; text needs a TrueType font (Debian
//! `fonts-dejavu-core`, which scripts/setup.sh installs), read at run time.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::play::Played;
use super::rate;
use super::sample::Sample;
use super::scenario::Action;
use super::verdict::windows;

/// Fonts tried, in order.
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

const SIZE: (u32, u32) = (1100, 640);

/// Registers the font once; an error naming the package when none is found.
fn font() -> Result<(), String> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let bytes = FONTS.iter().find_map(|p| std::fs::read(p).ok()).ok_or(
            "no TrueType font for the chart's text: install the Debian package fonts-dejavu-core",
        )?;
        // plotters keeps fonts for the life of the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| "the chart font does not parse".to_string())
    })
    .clone()
}

/// Writes `stem.svg` and `stem.png`; the file names written.
pub fn write(played: &Played, end: f64, dir: &Path, stem: &str) -> Result<Vec<String>, String> {
    font()?;
    let svg = format!("{stem}.svg");
    let png = format!("{stem}.png");
    let (svg_path, png_path) = (dir.join(&svg), dir.join(&png));
    let area = SVGBackend::new(&svg_path, SIZE).into_drawing_area();
    draw(&area, played, end).map_err(|e| format!("{svg}: {e}"))?;
    drop(area);
    let area = BitMapBackend::new(&png_path, SIZE).into_drawing_area();
    draw(&area, played, end).map_err(|e| format!("{png}: {e}"))?;
    Ok(vec![svg, png])
}

type Series = BTreeMap<String, Vec<(f64, f64)>>;

/// New calls per second per instance, over the samples' real intervals
/// ([`super::rate::series`]).
fn rates(played: &Played) -> Series {
    let ids: std::collections::BTreeSet<&String> = played
        .samples
        .iter()
        .flat_map(|s| s.new_work.keys())
        .collect();
    ids.into_iter()
        .map(|id| {
            let count = |s: &Sample| s.new_work.get(id).copied().unwrap_or(0);
            (id.clone(), rate::series(&played.samples, count))
        })
        .collect()
}

/// The name of the gate-failover series among the instances' rates.
const FAILOVER: &str = "calls failed over to another gate";

/// Gate failovers per second, as [`rates`]; none when no caller ever
/// failed over.
fn failovers(played: &Played) -> Option<Vec<(f64, f64)>> {
    played.samples.last().filter(|s| s.failovers > 0)?;
    Some(rate::series(&played.samples, |s| s.failovers))
}

/// When an Active-Passive leader change was first seen.
fn handovers(played: &Played) -> Vec<f64> {
    played
        .samples
        .windows(2)
        .filter(|w| w[1].ap_handovers > w[0].ap_handovers)
        .map(|w| w[1].t)
        .collect()
}

fn weights(played: &Played) -> Series {
    let mut out = Series::new();
    for s in &played.samples {
        for (id, w) in &s.mg_weight {
            out.entry(id.clone()).or_default().push((s.t, *w));
        }
    }
    out
}

fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    played: &Played,
    end: f64,
) -> Result<(), Box<dyn std::error::Error + 'static>>
where
    DB::ErrorType: 'static,
{
    area.fill(&WHITE)?;
    let (top, bottom) = area.split_vertically(SIZE.1 * 62 / 100);
    let x_end = played.samples.last().map_or(end, |s| s.t).max(end).max(1.0);
    let mut calls = rates(played);
    if let Some(f) = failovers(played) {
        calls.insert(FAILOVER.into(), f);
    }
    let y_max = calls.values().flatten().map(|p| p.1).fold(1.0, f64::max) * 1.15;
    panel(
        &top,
        played,
        &calls,
        "new calls per second, per instance (triangles: Active-Passive handovers)",
        (x_end, y_max),
        &handovers(played),
    )?;
    panel(
        &bottom,
        played,
        &weights(played),
        "mg weight for new calls",
        (x_end, 1.05),
        &[],
    )?;
    area.present()?;
    Ok(())
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    played: &Played,
    series: &Series,
    title: &str,
    (x_end, y_max): (f64, f64),
    handovers: &[f64],
) -> Result<(), Box<dyn std::error::Error + 'static>>
where
    DB::ErrorType: 'static,
{
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(28)
        .y_label_area_size(44)
        .build_cartesian_2d(0.0..x_end, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .light_line_style(WHITE)
        .draw()?;
    // Drain windows, shaded; every other step, a dashed line.
    for w in windows(&played.marks) {
        let to = w.to.unwrap_or(x_end);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(w.from, 0.0), (to, y_max)],
            RED.mix(0.10).filled(),
        )))?;
    }
    for m in played.marks.iter().filter(|m| {
        !matches!(
            m.action,
            Action::Load { .. } | Action::Activate { .. } | Action::Deactivate { .. }
        )
    }) {
        chart.draw_series(DashedLineSeries::new(
            [(m.t, 0.0), (m.t, y_max)],
            4,
            4,
            BLACK.mix(0.5).stroke_width(1),
        ))?;
    }
    if !handovers.is_empty() {
        let mark = |(x, y): (f64, f64)| TriangleMarker::new((x, y), 7, BLUE.filled());
        chart
            .draw_series(handovers.iter().map(|t| mark((*t, y_max * 0.93))))?
            .label("Active-Passive handover")
            .legend(move |(x, y)| TriangleMarker::new((x + 8, y), 5, BLUE.filled()));
    }
    for (i, (id, pts)) in series.iter().enumerate() {
        let color = if id == FAILOVER {
            BLACK.to_rgba()
        } else {
            Palette99::pick(i).to_rgba()
        };
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            .label(id.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    if !series.is_empty() || !handovers.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    Ok(())
}
