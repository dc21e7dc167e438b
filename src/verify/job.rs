//! The run's job (issue 52): the id dashboards join on, told to the command as `GPURUN_JOB_ID`
//! (launch), written to the dcgm-exporter job map and the `.prom` receipt, and kept in the
//! report as `job: {id, host, user, start, end}` (start and end in RFC 3339, UTC).
//!
//! The id is the scheduler's where there is one: Slurm's `SLURM_JOB_ID` (so gpurun's receipts
//! join Slurm's accounting and a Slurm prolog's dcgm job map), else the `--per-rank` group every
//! rank of one launch shares, else a `GPURUN_JOB_ID` inherited from an enclosing gpurun (the
//! same job), else one made here: `gpurun-<start, Unix seconds>-<gpurun's PID>`, unique on the
//! host.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Whose run it is, and where: known before the command starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct JobIdentity {
    pub(crate) id: String,
    pub(crate) host: String,
    pub(crate) user: String,
}

/// The job of a run that has ended, as the report keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct JobRecord {
    #[serde(flatten)]
    pub(crate) identity: JobIdentity,
    #[serde(serialize_with = "rfc3339")]
    pub(crate) start: SystemTime,
    #[serde(serialize_with = "rfc3339")]
    pub(crate) end: SystemTime,
}

fn rfc3339<S: serde::Serializer>(at: &SystemTime, to: S) -> Result<S::Ok, S::Error> {
    to.serialize_str(&crate::options::clock::rfc3339(*at))
}

/// Unix seconds, for the Prometheus text.
pub(crate) fn seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH).map_or(0.0, |since| since.as_secs_f64())
}

impl JobIdentity {
    /// This run's, started now: `group` is the `--per-rank` group's name, if the run is a rank.
    pub(crate) fn of_this_run(group: Option<&str>) -> JobIdentity {
        let start = SystemTime::now();
        let variable = |name: &str| std::env::var(name).ok();
        let host =
            nix::unistd::gethostname().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        JobIdentity {
            id: job_id(variable, group, start, std::process::id()),
            host,
            user: crate::process::procfs::user_name(nix::unistd::getuid().as_raw()),
        }
    }
}

/// The id, by the rule above (`variable`: the environment; an empty value is none).
fn job_id(
    variable: impl Fn(&str) -> Option<String>,
    group: Option<&str>,
    start: SystemTime,
    pid: u32,
) -> String {
    let given = |name: &str| variable(name).filter(|value| !value.trim().is_empty());
    given("SLURM_JOB_ID")
        .or_else(|| group.map(str::to_owned))
        .or_else(|| given("GPURUN_JOB_ID"))
        .unwrap_or_else(|| {
            let seconds = start.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs());
            format!("gpurun-{seconds}-{pid}")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedulers_id_first_then_the_group_the_enclosing_run_and_a_made_one() {
        let start = UNIX_EPOCH + std::time::Duration::from_secs(1_796_063_853);
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(key, _)| *key == name).map(|(_, value)| (*value).to_owned())
        };
        let both = env(&[("SLURM_JOB_ID", "4242"), ("GPURUN_JOB_ID", "outer")]);
        assert_eq!(job_id(both, Some("torchrun:x"), start, 7), "4242");
        assert_eq!(job_id(env(&[("GPURUN_JOB_ID", "outer")]), Some("torchrun:x"), start, 7), "torchrun:x");
        assert_eq!(job_id(env(&[("GPURUN_JOB_ID", "outer")]), None, start, 7), "outer");
        assert_eq!(job_id(env(&[("SLURM_JOB_ID", " ")]), None, start, 7), "gpurun-1796063853-7");
    }
}
