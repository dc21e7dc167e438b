//! The container clients' own options, from their `--help` (DESIGN 6b): every global option
//! and every `run` option of podman (4.3, and the few podman 5 added) and docker (28.2, which
//! has docker 24's), with whether it takes a value. A container run is read with these tables
//! alone: an option that is not in them is refused, never guessed past (a switch read as taking
//! a value, or the reverse, makes the next word the image, and the user's own GPU options go
//! unseen). The test below reads the installed clients' `--help` and fails when an option is
//! missing here or takes a value it is not marked with.

/// One option of a container client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientOption {
    /// Without its dashes: `env` for `--env`.
    pub(crate) long: &'static str,
    pub(crate) short: Option<char>,
    /// Takes a value (`--env X=y`, `--env=X=y`); a switch may still be given one attached
    /// (`--rm=false`).
    pub(crate) value: bool,
}

/// The option `--long` (a name without dashes).
pub(crate) fn by_long(table: &[ClientOption], long: &str) -> Option<ClientOption> {
    table.iter().find(|option| option.long == long).copied()
}

/// The option `-c`.
pub(crate) fn by_short(table: &[ClientOption], short: char) -> Option<ClientOption> {
    table.iter().find(|option| option.short == Some(short)).copied()
}

/// podman's global options (`podman --help`, podman 4.3), and those podman 5 added.
pub(crate) const PODMAN_GLOBAL: &[ClientOption] = &[
    ClientOption { long: "cgroup-manager", short: None, value: true },
    ClientOption { long: "conmon", short: None, value: true },
    ClientOption { long: "connection", short: Some('c'), value: true },
    ClientOption { long: "events-backend", short: None, value: true },
    ClientOption { long: "help", short: None, value: false },
    ClientOption { long: "hooks-dir", short: None, value: true },
    ClientOption { long: "identity", short: None, value: true },
    ClientOption { long: "log-level", short: None, value: true },
    ClientOption { long: "namespace", short: None, value: true },
    ClientOption { long: "network-cmd-path", short: None, value: true },
    ClientOption { long: "network-config-dir", short: None, value: true },
    ClientOption { long: "noout", short: None, value: false },
    ClientOption { long: "remote", short: Some('r'), value: false },
    ClientOption { long: "root", short: None, value: true },
    ClientOption { long: "runroot", short: None, value: true },
    ClientOption { long: "runtime", short: None, value: true },
    ClientOption { long: "runtime-flag", short: None, value: true },
    ClientOption { long: "ssh", short: None, value: true },
    ClientOption { long: "storage-driver", short: None, value: true },
    ClientOption { long: "storage-opt", short: None, value: true },
    ClientOption { long: "syslog", short: None, value: false },
    ClientOption { long: "tmpdir", short: None, value: true },
    ClientOption { long: "url", short: None, value: true },
    ClientOption { long: "version", short: Some('v'), value: false },
    ClientOption { long: "volumepath", short: None, value: true },
    ClientOption { long: "config", short: None, value: true },
    ClientOption { long: "db-backend", short: None, value: true },
    ClientOption { long: "imagestore", short: None, value: true },
    ClientOption { long: "module", short: None, value: true },
    ClientOption { long: "out", short: None, value: true },
    ClientOption { long: "transient-store", short: None, value: false },
];

/// `podman run`'s options (`podman run --help`, podman 4.3), and those podman 5 added.
pub(crate) const PODMAN_RUN: &[ClientOption] = &[
    ClientOption { long: "add-host", short: None, value: true },
    ClientOption { long: "annotation", short: None, value: true },
    ClientOption { long: "arch", short: None, value: true },
    ClientOption { long: "attach", short: Some('a'), value: true },
    ClientOption { long: "authfile", short: None, value: true },
    ClientOption { long: "blkio-weight", short: None, value: true },
    ClientOption { long: "blkio-weight-device", short: None, value: true },
    ClientOption { long: "cap-add", short: None, value: true },
    ClientOption { long: "cap-drop", short: None, value: true },
    ClientOption { long: "cgroup-conf", short: None, value: true },
    ClientOption { long: "cgroup-parent", short: None, value: true },
    ClientOption { long: "cgroupns", short: None, value: true },
    ClientOption { long: "cgroups", short: None, value: true },
    ClientOption { long: "chrootdirs", short: None, value: true },
    ClientOption { long: "cidfile", short: None, value: true },
    ClientOption { long: "conmon-pidfile", short: None, value: true },
    ClientOption { long: "cpu-period", short: None, value: true },
    ClientOption { long: "cpu-quota", short: None, value: true },
    ClientOption { long: "cpu-rt-period", short: None, value: true },
    ClientOption { long: "cpu-rt-runtime", short: None, value: true },
    ClientOption { long: "cpu-shares", short: Some('c'), value: true },
    ClientOption { long: "cpus", short: None, value: true },
    ClientOption { long: "cpuset-cpus", short: None, value: true },
    ClientOption { long: "cpuset-mems", short: None, value: true },
    ClientOption { long: "detach", short: Some('d'), value: false },
    ClientOption { long: "detach-keys", short: None, value: true },
    ClientOption { long: "device", short: None, value: true },
    ClientOption { long: "device-cgroup-rule", short: None, value: true },
    ClientOption { long: "device-read-bps", short: None, value: true },
    ClientOption { long: "device-read-iops", short: None, value: true },
    ClientOption { long: "device-write-bps", short: None, value: true },
    ClientOption { long: "device-write-iops", short: None, value: true },
    ClientOption { long: "disable-content-trust", short: None, value: false },
    ClientOption { long: "dns", short: None, value: true },
    ClientOption { long: "dns-option", short: None, value: true },
    ClientOption { long: "dns-search", short: None, value: true },
    ClientOption { long: "entrypoint", short: None, value: true },
    ClientOption { long: "env", short: Some('e'), value: true },
    ClientOption { long: "env-file", short: None, value: true },
    ClientOption { long: "env-host", short: None, value: false },
    ClientOption { long: "env-merge", short: None, value: true },
    ClientOption { long: "expose", short: None, value: true },
    ClientOption { long: "gidmap", short: None, value: true },
    ClientOption { long: "group-add", short: None, value: true },
    ClientOption { long: "health-cmd", short: None, value: true },
    ClientOption { long: "health-interval", short: None, value: true },
    ClientOption { long: "health-on-failure", short: None, value: true },
    ClientOption { long: "health-retries", short: None, value: true },
    ClientOption { long: "health-start-period", short: None, value: true },
    ClientOption { long: "health-timeout", short: None, value: true },
    ClientOption { long: "help", short: None, value: false },
    ClientOption { long: "hostname", short: Some('h'), value: true },
    ClientOption { long: "hostuser", short: None, value: true },
    ClientOption { long: "http-proxy", short: None, value: false },
    ClientOption { long: "image-volume", short: None, value: true },
    ClientOption { long: "init", short: None, value: false },
    ClientOption { long: "init-path", short: None, value: true },
    ClientOption { long: "interactive", short: Some('i'), value: false },
    ClientOption { long: "ip", short: None, value: true },
    ClientOption { long: "ip6", short: None, value: true },
    ClientOption { long: "ipc", short: None, value: true },
    ClientOption { long: "label", short: Some('l'), value: true },
    ClientOption { long: "label-file", short: None, value: true },
    ClientOption { long: "log-driver", short: None, value: true },
    ClientOption { long: "log-opt", short: None, value: true },
    ClientOption { long: "mac-address", short: None, value: true },
    ClientOption { long: "memory", short: Some('m'), value: true },
    ClientOption { long: "memory-reservation", short: None, value: true },
    ClientOption { long: "memory-swap", short: None, value: true },
    ClientOption { long: "memory-swappiness", short: None, value: true },
    ClientOption { long: "mount", short: None, value: true },
    ClientOption { long: "name", short: None, value: true },
    ClientOption { long: "network", short: None, value: true },
    ClientOption { long: "network-alias", short: None, value: true },
    ClientOption { long: "no-healthcheck", short: None, value: false },
    ClientOption { long: "no-hosts", short: None, value: false },
    ClientOption { long: "oom-kill-disable", short: None, value: false },
    ClientOption { long: "oom-score-adj", short: None, value: true },
    ClientOption { long: "os", short: None, value: true },
    ClientOption { long: "passwd", short: None, value: false },
    ClientOption { long: "passwd-entry", short: None, value: true },
    ClientOption { long: "personality", short: None, value: true },
    ClientOption { long: "pid", short: None, value: true },
    ClientOption { long: "pidfile", short: None, value: true },
    ClientOption { long: "pids-limit", short: None, value: true },
    ClientOption { long: "platform", short: None, value: true },
    ClientOption { long: "pod", short: None, value: true },
    ClientOption { long: "pod-id-file", short: None, value: true },
    ClientOption { long: "preserve-fds", short: None, value: true },
    ClientOption { long: "privileged", short: None, value: false },
    ClientOption { long: "publish", short: Some('p'), value: true },
    ClientOption { long: "publish-all", short: Some('P'), value: false },
    ClientOption { long: "pull", short: None, value: true },
    ClientOption { long: "quiet", short: Some('q'), value: false },
    ClientOption { long: "read-only", short: None, value: false },
    ClientOption { long: "read-only-tmpfs", short: None, value: false },
    ClientOption { long: "replace", short: None, value: false },
    ClientOption { long: "requires", short: None, value: true },
    ClientOption { long: "restart", short: None, value: true },
    ClientOption { long: "rm", short: None, value: false },
    ClientOption { long: "rmi", short: None, value: false },
    ClientOption { long: "rootfs", short: None, value: false },
    ClientOption { long: "sdnotify", short: None, value: true },
    ClientOption { long: "seccomp-policy", short: None, value: true },
    ClientOption { long: "secret", short: None, value: true },
    ClientOption { long: "security-opt", short: None, value: true },
    ClientOption { long: "shm-size", short: None, value: true },
    ClientOption { long: "sig-proxy", short: None, value: false },
    ClientOption { long: "stop-signal", short: None, value: true },
    ClientOption { long: "stop-timeout", short: None, value: true },
    ClientOption { long: "subgidname", short: None, value: true },
    ClientOption { long: "subuidname", short: None, value: true },
    ClientOption { long: "sysctl", short: None, value: true },
    ClientOption { long: "systemd", short: None, value: true },
    ClientOption { long: "timeout", short: None, value: true },
    ClientOption { long: "tls-verify", short: None, value: false },
    ClientOption { long: "tmpfs", short: None, value: true },
    ClientOption { long: "tty", short: Some('t'), value: false },
    ClientOption { long: "tz", short: None, value: true },
    ClientOption { long: "uidmap", short: None, value: true },
    ClientOption { long: "ulimit", short: None, value: true },
    ClientOption { long: "umask", short: None, value: true },
    ClientOption { long: "unsetenv", short: None, value: true },
    ClientOption { long: "unsetenv-all", short: None, value: false },
    ClientOption { long: "user", short: Some('u'), value: true },
    ClientOption { long: "userns", short: None, value: true },
    ClientOption { long: "uts", short: None, value: true },
    ClientOption { long: "variant", short: None, value: true },
    ClientOption { long: "volume", short: Some('v'), value: true },
    ClientOption { long: "volumes-from", short: None, value: true },
    ClientOption { long: "workdir", short: Some('w'), value: true },
    // podman 5: --gpus (CDI nvidia.com/gpu devices), a GPU option of its own that gpurun refuses.
    ClientOption { long: "gpus", short: None, value: true },
    ClientOption { long: "hosts-file", short: None, value: true },
    ClientOption { long: "no-hostname", short: None, value: false },
    ClientOption { long: "preserve-fd", short: None, value: true },
    ClientOption { long: "rdt-class", short: None, value: true },
    ClientOption { long: "retry", short: None, value: true },
    ClientOption { long: "retry-delay", short: None, value: true },
    ClientOption { long: "shm-size-systemd", short: None, value: true },
];

/// docker's global options (`docker --help`, docker 28.2; docker 24 has the same).
pub(crate) const DOCKER_GLOBAL: &[ClientOption] = &[
    ClientOption { long: "config", short: None, value: true },
    ClientOption { long: "context", short: Some('c'), value: true },
    ClientOption { long: "debug", short: Some('D'), value: false },
    ClientOption { long: "host", short: Some('H'), value: true },
    ClientOption { long: "log-level", short: Some('l'), value: true },
    ClientOption { long: "tls", short: None, value: false },
    ClientOption { long: "tlscacert", short: None, value: true },
    ClientOption { long: "tlscert", short: None, value: true },
    ClientOption { long: "tlskey", short: None, value: true },
    ClientOption { long: "tlsverify", short: None, value: false },
    ClientOption { long: "version", short: Some('v'), value: false },
];

/// `docker run`'s options (`docker run --help`, docker 28.2: docker 24's and those added since).
pub(crate) const DOCKER_RUN: &[ClientOption] = &[
    ClientOption { long: "add-host", short: None, value: true },
    ClientOption { long: "annotation", short: None, value: true },
    ClientOption { long: "attach", short: Some('a'), value: true },
    ClientOption { long: "blkio-weight", short: None, value: true },
    ClientOption { long: "blkio-weight-device", short: None, value: true },
    ClientOption { long: "cap-add", short: None, value: true },
    ClientOption { long: "cap-drop", short: None, value: true },
    ClientOption { long: "cgroup-parent", short: None, value: true },
    ClientOption { long: "cgroupns", short: None, value: true },
    ClientOption { long: "cidfile", short: None, value: true },
    ClientOption { long: "cpu-count", short: None, value: true },
    ClientOption { long: "cpu-percent", short: None, value: true },
    ClientOption { long: "cpu-period", short: None, value: true },
    ClientOption { long: "cpu-quota", short: None, value: true },
    ClientOption { long: "cpu-rt-period", short: None, value: true },
    ClientOption { long: "cpu-rt-runtime", short: None, value: true },
    ClientOption { long: "cpu-shares", short: Some('c'), value: true },
    ClientOption { long: "cpus", short: None, value: true },
    ClientOption { long: "cpuset-cpus", short: None, value: true },
    ClientOption { long: "cpuset-mems", short: None, value: true },
    ClientOption { long: "detach", short: Some('d'), value: false },
    ClientOption { long: "detach-keys", short: None, value: true },
    ClientOption { long: "device", short: None, value: true },
    ClientOption { long: "device-cgroup-rule", short: None, value: true },
    ClientOption { long: "device-read-bps", short: None, value: true },
    ClientOption { long: "device-read-iops", short: None, value: true },
    ClientOption { long: "device-write-bps", short: None, value: true },
    ClientOption { long: "device-write-iops", short: None, value: true },
    ClientOption { long: "disable-content-trust", short: None, value: false },
    ClientOption { long: "dns", short: None, value: true },
    ClientOption { long: "dns-option", short: None, value: true },
    ClientOption { long: "dns-search", short: None, value: true },
    ClientOption { long: "domainname", short: None, value: true },
    ClientOption { long: "entrypoint", short: None, value: true },
    ClientOption { long: "env", short: Some('e'), value: true },
    ClientOption { long: "env-file", short: None, value: true },
    ClientOption { long: "expose", short: None, value: true },
    ClientOption { long: "gpus", short: None, value: true },
    ClientOption { long: "group-add", short: None, value: true },
    ClientOption { long: "health-cmd", short: None, value: true },
    ClientOption { long: "health-interval", short: None, value: true },
    ClientOption { long: "health-retries", short: None, value: true },
    ClientOption { long: "health-start-interval", short: None, value: true },
    ClientOption { long: "health-start-period", short: None, value: true },
    ClientOption { long: "health-timeout", short: None, value: true },
    ClientOption { long: "help", short: None, value: false },
    ClientOption { long: "hostname", short: Some('h'), value: true },
    ClientOption { long: "init", short: None, value: false },
    ClientOption { long: "interactive", short: Some('i'), value: false },
    ClientOption { long: "io-maxbandwidth", short: None, value: true },
    ClientOption { long: "io-maxiops", short: None, value: true },
    ClientOption { long: "ip", short: None, value: true },
    ClientOption { long: "ip6", short: None, value: true },
    ClientOption { long: "ipc", short: None, value: true },
    ClientOption { long: "isolation", short: None, value: true },
    ClientOption { long: "kernel-memory", short: None, value: true },
    ClientOption { long: "label", short: Some('l'), value: true },
    ClientOption { long: "label-file", short: None, value: true },
    ClientOption { long: "link", short: None, value: true },
    ClientOption { long: "link-local-ip", short: None, value: true },
    ClientOption { long: "log-driver", short: None, value: true },
    ClientOption { long: "log-opt", short: None, value: true },
    ClientOption { long: "mac-address", short: None, value: true },
    ClientOption { long: "memory", short: Some('m'), value: true },
    ClientOption { long: "memory-reservation", short: None, value: true },
    ClientOption { long: "memory-swap", short: None, value: true },
    ClientOption { long: "memory-swappiness", short: None, value: true },
    ClientOption { long: "mount", short: None, value: true },
    ClientOption { long: "name", short: None, value: true },
    ClientOption { long: "network", short: None, value: true },
    ClientOption { long: "network-alias", short: None, value: true },
    ClientOption { long: "no-healthcheck", short: None, value: false },
    ClientOption { long: "oom-kill-disable", short: None, value: false },
    ClientOption { long: "oom-score-adj", short: None, value: true },
    ClientOption { long: "pid", short: None, value: true },
    ClientOption { long: "pids-limit", short: None, value: true },
    ClientOption { long: "platform", short: None, value: true },
    ClientOption { long: "privileged", short: None, value: false },
    ClientOption { long: "publish", short: Some('p'), value: true },
    ClientOption { long: "publish-all", short: Some('P'), value: false },
    ClientOption { long: "pull", short: None, value: true },
    ClientOption { long: "quiet", short: Some('q'), value: false },
    ClientOption { long: "read-only", short: None, value: false },
    ClientOption { long: "restart", short: None, value: true },
    ClientOption { long: "rm", short: None, value: false },
    ClientOption { long: "runtime", short: None, value: true },
    ClientOption { long: "security-opt", short: None, value: true },
    ClientOption { long: "shm-size", short: None, value: true },
    ClientOption { long: "sig-proxy", short: None, value: false },
    ClientOption { long: "stop-signal", short: None, value: true },
    ClientOption { long: "stop-timeout", short: None, value: true },
    ClientOption { long: "storage-opt", short: None, value: true },
    ClientOption { long: "sysctl", short: None, value: true },
    ClientOption { long: "tmpfs", short: None, value: true },
    ClientOption { long: "tty", short: Some('t'), value: false },
    ClientOption { long: "ulimit", short: None, value: true },
    ClientOption { long: "use-api-socket", short: None, value: false },
    ClientOption { long: "user", short: Some('u'), value: true },
    ClientOption { long: "userns", short: None, value: true },
    ClientOption { long: "uts", short: None, value: true },
    ClientOption { long: "volume", short: Some('v'), value: true },
    ClientOption { long: "volume-driver", short: None, value: true },
    ClientOption { long: "volumes-from", short: None, value: true },
    ClientOption { long: "workdir", short: Some('w'), value: true },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The options a client's `--help` lists in `section` (`Options:`, `Global Options:`):
    /// `  -e, --env stringArray   ...` takes a value, `      --rm   ...` does not.
    fn listed(help: &str, section: &str) -> Vec<(String, Option<char>, bool)> {
        let mut found = Vec::new();
        let mut inside = false;
        for line in help.lines() {
            if line.trim() == section {
                inside = true;
                continue;
            }
            if inside && !line.is_empty() && !line.starts_with(' ') {
                inside = false;
            }
            let flag = line.trim_start();
            if !inside || !line.starts_with("  ") || !flag.starts_with('-') {
                continue;
            }
            // The flag part ends where two spaces begin the description.
            let head = flag.split("  ").next().unwrap_or_default();
            let mut words = head.split_whitespace().peekable();
            let mut short = None;
            if let Some(first) =
                words.peek().filter(|w| w.len() == 3 && w.starts_with('-') && w.ends_with(','))
            {
                short = first.chars().nth(1);
                words.next();
            }
            let Some(long) = words.next().and_then(|w| w.strip_prefix("--")) else { continue };
            found.push((long.to_owned(), short, words.next().is_some()));
        }
        found
    }

    fn help_of(client: &str, args: &[&str]) -> Option<String> {
        let output = std::process::Command::new(client).args(args).output().ok()?;
        Some(String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr))
    }

    fn compare(client: &str, args: &[&str], section: &str, table: &[ClientOption]) {
        let Some(help) = help_of(client, args) else {
            if std::env::var_os("CI_NO_SKIP").is_some_and(|v| !v.is_empty() && v != "0") {
                panic!("{client} is not installed, and CI_NO_SKIP is set");
            }
            return eprintln!("SKIPPED {client} {args:?}: {client} is not installed");
        };
        let options = listed(&help, section);
        assert!(options.len() > 5, "{client} {args:?} listed no options:\n{help}");
        for (long, short, value) in options {
            let known = by_long(table, &long).unwrap_or_else(|| {
                panic!(
                    "{client} {args:?}: --{long} is not in gpurun's table (src/launch/container_options.rs)"
                )
            });
            assert_eq!(known.value, value, "{client} --{long}: takes a value is {value} in its --help");
            assert_eq!(known.short, short, "{client} --{long}: its short form");
        }
    }

    #[test]
    fn every_option_the_installed_clients_list_is_known_and_takes_what_it_says() {
        compare("podman", &["--help"], "Options:", PODMAN_GLOBAL);
        compare("podman", &["run", "--help"], "Options:", PODMAN_RUN);
        compare("docker", &["--help"], "Global Options:", DOCKER_GLOBAL);
        compare("docker", &["run", "--help"], "Options:", DOCKER_RUN);
    }

    #[test]
    fn the_options_that_fooled_the_old_scanner() {
        assert_eq!(by_long(PODMAN_RUN, "env-merge").map(|o| o.value), Some(true));
        assert_eq!(by_long(PODMAN_RUN, "unsetenv-all").map(|o| o.value), Some(false));
        assert_eq!(by_long(PODMAN_GLOBAL, "namespace").map(|o| o.value), Some(true));
        assert_eq!(by_short(DOCKER_RUN, 'd').map(|o| o.long), Some("detach"));
        assert_eq!(by_long(DOCKER_RUN, "no-such-option"), None);
    }
}
