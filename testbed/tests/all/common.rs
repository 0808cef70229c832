//! Shared pieces of the call benchmarks' end-to-end tests
//! (`flood_bench.rs`, `reg_avalanche.rs`): one run of a benchmark binary
//! and the rows of the CSV it writes.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// What a benchmark's run left: what it said on stderr, its table
/// (`OUT/results.md`, which it also printed) and its CSV of every run
/// (`OUT/runs.csv`).
pub struct BenchRun {
    pub stderr: String,
    pub table: String,
    pub csv: String,
}

/// Runs the benchmark binary `bin` with `args` and `--out out`; asserts
/// that it succeeded and that what it printed is the table it wrote.
pub fn run_bench(bin: &str, args: &[&str], out: &Path) -> BenchRun {
    let run = Command::new(bin)
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap_or_else(|e| panic!("{bin} runs: {e}"));
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{stderr}");
    let table = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), table.trim());
    let csv = std::fs::read_to_string(out.join("runs.csv")).unwrap();
    BenchRun { stderr, table, csv }
}

/// The CSV's rows, each as column name -> value.
pub fn rows(csv: &str) -> Vec<HashMap<String, String>> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    lines
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            assert_eq!(cells.len(), header.len(), "{l}");
            header
                .iter()
                .zip(cells)
                .map(|(h, c)| (h.to_string(), c.to_string()))
                .collect()
        })
        .collect()
}

/// The number in column `col` of `row`.
pub fn num(row: &HashMap<String, String>, col: &str) -> f64 {
    row[col]
        .parse()
        .unwrap_or_else(|_| panic!("{col} = {:?}", row[col]))
}
