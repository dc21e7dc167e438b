//! `--prom-file`: the receipt as Prometheus text (exposition format 0.0.4), for node_exporter's
//! textfile collector (issue 52). Rendered from the report's JSON, the documented schema, so the
//! two never say different things.
//!
//! Names and labels follow dcgm-exporter's where it has the figure, so one dashboard joins both:
//! the labels `gpu` (the NVML index), `UUID`, `modelName`, `Hostname` and `hpc_job` (the label
//! dcgm-exporter's HPC job mapping adds), and the metric names `gpurun_job_` and DCGM's field
//! name in its unit: `total_energy_consumption` in mJ (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
//! here the run's share: end minus start), `power_usage` in W (DCGM_FI_DEV_POWER_USAGE, the
//! run's mean and max), `enforced_power_limit` in W, `gpu_util` in % (DCGM_FI_DEV_GPU_UTIL, the
//! run's p50, p95 and max as `quantile`). Unknown figures (a board without an energy counter)
//! are left out, never written as 0.

use std::fmt::Write as _;

use serde_json::Value;

use crate::verify::job::{seconds, JobIdentity, JobRecord};
use crate::verify::report::Report;

/// A label value as the text format writes it: backslash, quote and newline escaped.
fn escaped(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> =
        pairs.iter().map(|(name, value)| format!("{name}=\"{}\"", escaped(value))).collect();
    format!("{{{}}}", inner.join(","))
}

/// One metric family: its help, its type and its samples (labels, value).
struct Family {
    name: &'static str,
    help: &'static str,
    samples: Vec<(String, f64)>,
}

impl Family {
    fn new(name: &'static str, help: &'static str) -> Family {
        Family { name, help, samples: Vec::new() }
    }

    fn write(&self, text: &mut String) {
        if self.samples.is_empty() {
            return;
        }
        let _ = writeln!(text, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(text, "# TYPE {} gauge", self.name);
        for (labels, value) in &self.samples {
            let _ = writeln!(text, "{}{labels} {value}", self.name);
        }
    }
}

/// `--prom-file`: the report's receipt written whole to `path` (a failure is a warning: a
/// dashboard is never the job's problem).
pub(crate) fn write(path: &std::path::Path, report: &Report) {
    let Some(job) = &report.job else { return };
    let text = render(&serde_json::to_value(report).expect("plain data"), job);
    if let Err(error) = crate::process::replace::replace_file(path, &text) {
        tracing::warn!("--prom-file {}: cannot write the receipt: {error}", path.display());
    }
}

/// The report (`--report-json`'s object) as Prometheus text, for `job`.
fn render(report: &Value, job: &JobRecord) -> String {
    let JobIdentity { id, host, user } = &job.identity;
    let (id, host, user) = (id.as_str(), host.as_str(), user.as_str());
    let run = [("hpc_job", id), ("Hostname", host)];
    let verdict = report["verification"]["verdict"].as_str().unwrap_or("none");
    let mut info =
        Family::new("gpurun_job_info", "The run, labelled with its job, user and verdict (always 1).");
    let info_labels = [("hpc_job", id), ("Hostname", host), ("user", user), ("verdict", verdict)];
    info.samples.push((labels(&info_labels), 1.0));
    let mut families = vec![info];
    let mut scalar = |name, help, value: Option<f64>| {
        let mut family = Family::new(name, help);
        family.samples.extend(value.map(|value| (labels(&run), value)));
        families.push(family);
    };
    scalar(
        "gpurun_job_start_time_seconds",
        "When the command started, Unix seconds.",
        Some(seconds(job.start)),
    );
    scalar("gpurun_job_end_time_seconds", "When the run ended, Unix seconds.", Some(seconds(job.end)));
    scalar("gpurun_job_wall_seconds", "How long the command ran, seconds.", report["wall_seconds"].as_f64());
    let status = report["gpurun_exit_status"].as_f64();
    scalar(
        "gpurun_job_exit_status",
        "What gpurun exited with (the command's status, 124 at a limit).",
        status,
    );
    families.extend(per_gpu(report, (id, host)));
    let mut diagnosis = Family::new("gpurun_job_diagnosis", "Findings of the run's diagnosis, by kind.");
    let mut kinds: std::collections::BTreeMap<&str, f64> = std::collections::BTreeMap::new();
    for kind in report["diagnosis"].as_array().into_iter().flatten().filter_map(|d| d["kind"].as_str()) {
        *kinds.entry(kind).or_default() += 1.0;
    }
    for (kind, count) in kinds {
        diagnosis.samples.push((labels(&[run[0], run[1], ("kind", kind)]), count));
    }
    families.push(diagnosis);
    let mut text = String::new();
    families.iter().for_each(|family| family.write(&mut text));
    text
}

/// The chosen GPUs' figures, each labelled as dcgm-exporter labels that GPU.
fn per_gpu(report: &Value, (id, host): (&str, &str)) -> Vec<Family> {
    let mut energy = Family::new(
        "gpurun_job_total_energy_consumption",
        "Energy the GPU drew during the run, mJ (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, end minus start).",
    );
    let mut power = Family::new("gpurun_job_power_usage", "Power draw during the run, W: mean and max.");
    let mut limit = Family::new("gpurun_job_enforced_power_limit", "The enforced power limit, W.");
    let mut util = Family::new("gpurun_job_gpu_util", "GPU utilization during the run, %: p50, p95 and max.");
    let mut peak =
        Family::new("gpurun_job_peak_memory_bytes", "The command's largest GPU memory total, bytes.");
    let mut throttled =
        Family::new("gpurun_job_throttled_seconds", "Seconds the clocks were held back, by reason.");
    for device in report["selected"].as_array().into_iter().flatten() {
        let Some(uuid) = device["uuid"].as_str() else { continue };
        let index = device["index"].as_u64().map(|i| i.to_string()).unwrap_or_default();
        let name = device["name"].as_str().unwrap_or_default();
        let gpu = [("gpu", index.as_str()), ("UUID", uuid), ("modelName", name), ("Hostname", host)];
        let with = |extra: Option<(&str, &str)>| {
            let mut pairs = gpu.to_vec();
            pairs.push(("hpc_job", id));
            pairs.extend(extra);
            labels(&pairs)
        };
        if let Some(joules) = report["energy_joules"][uuid].as_f64() {
            energy.samples.push((with(None), (joules * 1000.0).round()));
        }
        for stat in ["mean", "max"] {
            if let Some(watts) = report["power_watts"][uuid][stat].as_f64() {
                power.samples.push((with(Some(("stat", stat))), watts));
            }
        }
        limit.samples.extend(report["power_watts"][uuid]["limit"].as_f64().map(|watts| (with(None), watts)));
        for (quantile, key) in [("0.5", "p50"), ("0.95", "p95"), ("1", "max")] {
            if let Some(percent) = report["utilization_percent"][uuid][key].as_f64() {
                util.samples.push((with(Some(("quantile", quantile))), percent));
            }
        }
        peak.samples.extend(report["peak_memory_bytes"][uuid].as_f64().map(|bytes| (with(None), bytes)));
        for (reason, seconds) in report["throttled_seconds"][uuid].as_object().into_iter().flatten() {
            if let Some(seconds) = seconds.as_f64() {
                throttled.samples.push((with(Some(("reason", reason.as_str()))), seconds));
            }
        }
    }
    vec![energy, power, limit, util, peak, throttled]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receipt_as_dcgm_exporter_labels_it() {
        let report = serde_json::json!({
            "selected": [{"index": 3, "uuid": "GPU-a", "name": "NVIDIA A100"}],
            "verification": {"verdict": "verified"},
            "wall_seconds": 1.5,
            "gpurun_exit_status": 0,
            "energy_joules": {"GPU-a": 61.305},
            "power_watts": {"GPU-a": {"mean": 61.0, "max": 62.5, "limit": 400.0}},
            "utilization_percent": {"GPU-a": {"p50": 0, "p95": 3, "max": 9}},
            "peak_memory_bytes": {"GPU-a": 1024},
            "throttled_seconds": {"GPU-a": {"hw_slowdown": 2.1}},
            "diagnosis": [{"kind": "idle"}, {"kind": "xid"}, {"kind": "xid"}],
        });
        let identity = JobIdentity { id: "4242".into(), host: "node\"1".into(), user: "alice".into() };
        let at = |s| std::time::UNIX_EPOCH + std::time::Duration::from_millis(s);
        let job = JobRecord { identity, start: at(10_000), end: at(11_500) };
        let text = render(&report, &job);
        let gpu = r#"gpu="3",UUID="GPU-a",modelName="NVIDIA A100",Hostname="node\"1",hpc_job="4242""#;
        assert!(text.contains(&format!("gpurun_job_total_energy_consumption{{{gpu}}} 61305\n")), "{text}");
        assert!(text.contains(&format!("gpurun_job_power_usage{{{gpu},stat=\"max\"}} 62.5\n")), "{text}");
        assert!(text.contains(&format!("gpurun_job_gpu_util{{{gpu},quantile=\"0.95\"}} 3\n")), "{text}");
        assert!(
            text.contains(r#"gpurun_job_diagnosis{hpc_job="4242",Hostname="node\"1",kind="xid"} 2"#),
            "{text}"
        );
        assert!(text.contains("# TYPE gpurun_job_info gauge\n"), "{text}");
        // A figure nobody read is left out, never written as 0.
        let bare = serde_json::json!({"selected": [{"index": 3, "uuid": "GPU-a", "name": "x"}], "energy_joules": {"GPU-a": null}});
        assert!(!render(&bare, &job).contains("energy"), "{}", render(&bare, &job));
    }
}
