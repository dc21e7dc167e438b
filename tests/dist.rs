//! `make dist` (DESIGN 15): the tarball, the .deb and the .rpm that `make test` builds into
//! dist/ before the suite runs. Their files, their checksums, a binary that needs no glibc newer
//! than 2.17, and the unpacked binary run on the simulator.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{default_scenario, sim_cuda, skip, Sim};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn dist() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("dist");
    if dir.join("SHA256SUMS").exists() {
        Some(dir)
    } else {
        skip("make dist's artefacts", "dist/ is empty: make dist (make test runs it) builds them");
        None
    }
}

fn output(program: &str, args: &[&str], dir: &Path) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every file a release holds, at its place in a prefix (the tarball's and install.sh's).
const PREFIX_FILES: &[&str] = &[
    "bin/gpurun",
    "share/man/man1/gpurun.1",
    "share/bash-completion/completions/gpurun",
    "share/zsh/site-functions/_gpurun",
    "share/fish/vendor_completions.d/gpurun.fish",
    "share/doc/gpurun/config.toml",
    "share/doc/gpurun/README.md",
    "share/doc/gpurun/doc/guide.md",
    "share/doc/gpurun/doc/guide/slurm.md",
    "share/doc/gpurun/doc/development.md",
];

/// ...and at its FHS place in the packages.
const PACKAGE_FILES: &[&str] = &[
    "/usr/bin/gpurun",
    "/usr/share/man/man1/gpurun.1",
    "/usr/share/bash-completion/completions/gpurun",
    "/usr/share/zsh/vendor-completions/_gpurun",
    "/usr/share/fish/vendor_completions.d/gpurun.fish",
    "/usr/lib/tmpfiles.d/gpurun.conf",
    "/etc/gpurun/config.toml",
];

#[test]
fn the_artefacts_are_there_with_checksums_that_verify() {
    let Some(dist) = dist() else { return };
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    for name in [
        format!("gpurun-{VERSION}-x86_64-linux-gnu.tar.gz"),
        format!("gpurun-gpu-check-{VERSION}-x86_64-linux-gnu.tar.gz"),
        format!("gpurun_{VERSION}_amd64.deb"),
        format!("gpurun-{VERSION}-1.x86_64.rpm"),
    ] {
        assert!(
            sums.lines().any(|line| line.ends_with(&format!("  {name}"))),
            "{name} not in SHA256SUMS:\n{sums}"
        );
    }
    output("sha256sum", &["-c", "SHA256SUMS"], &dist);
}

#[test]
fn the_tarball_holds_the_release_and_its_binary_needs_at_most_glibc_2_17() {
    let Some(dist) = dist() else { return };
    let unpacked = tempfile::tempdir().unwrap();
    let tarball = dist.join(format!("gpurun-{VERSION}-x86_64-linux-gnu.tar.gz"));
    output("tar", &["-xzf", tarball.to_str().unwrap(), "-C", unpacked.path().to_str().unwrap()], &dist);
    let root = unpacked.path().join(format!("gpurun-{VERSION}"));
    for file in PREFIX_FILES.iter().chain(&[
        "lib/tmpfiles.d/gpurun.conf",
        "install.sh",
        "LICENSE-MIT",
        "LICENSE-APACHE",
    ]) {
        assert!(root.join(file).is_file(), "{file} is not in the tarball");
    }
    assert_glibc_2_17(&root.join("bin/gpurun"), &dist);

    // It runs on the simulator: the listing, and a launch verified on its GPU.
    let sim = Sim::new(&default_scenario());
    let binary = root.join("bin/gpurun");
    let listed = sim.gpurun_command(binary.to_str().unwrap(), &["--list"]).run();
    listed.status(0).stdout_has("NVIDIA driver 550.54.15, CUDA 12.4, 8 GPUs");
    let cuda = sim_cuda();
    let launched = sim
        .gpurun_command(
            binary.to_str().unwrap(),
            &["--gpus", "1", "--", cuda.to_str().unwrap(), "--mem", "1GiB", "--sleep", "1"],
        )
        .run();
    launched.status(0).stderr_has("verified: PID");

    // install.sh lays it out under a user's prefix by make install's rules (no tmpfiles entry).
    let prefix = unpacked.path().join("prefix");
    let said = Command::new(root.join("install.sh")).env("PREFIX", &prefix).output().unwrap();
    assert!(said.status.success(), "{}", String::from_utf8_lossy(&said.stderr));
    assert!(String::from_utf8_lossy(&said.stdout).contains("tmpfiles entry not installed"));
    for file in PREFIX_FILES {
        assert!(prefix.join(file).is_file(), "install.sh did not install {file}");
    }
    assert!(!prefix.join("lib/tmpfiles.d").exists());
    assert_links_resolve(&prefix.join("share/doc/gpurun"));
    // --uninstall takes every file away again, and only those: a neighbour's file stays.
    std::fs::write(prefix.join("share/man/man1/other.1"), "other").unwrap();
    let removed =
        Command::new(root.join("install.sh")).arg("--uninstall").env("PREFIX", &prefix).output().unwrap();
    assert!(removed.status.success(), "{}", String::from_utf8_lossy(&removed.stderr));
    for file in PREFIX_FILES {
        assert!(!prefix.join(file).exists(), "install.sh --uninstall left {file}");
    }
    assert!(prefix.join("share/man/man1/other.1").exists());
}

/// Every relative link of the installed docs names a file that is installed (issue 42,
/// point 10: the README's doc/guide.md and the guide's ../README.md pointed nowhere).
fn assert_links_resolve(docs: &Path) {
    let mut checked = 0;
    let pages = std::fs::read_dir(docs.join("doc/guide"))
        .unwrap()
        .map(|entry| format!("doc/guide/{}", entry.unwrap().file_name().to_string_lossy()));
    let files: Vec<String> =
        ["README.md", "doc/guide.md", "doc/development.md", "doc/performance.md", "doc/design.md"]
            .into_iter()
            .map(str::to_owned)
            .chain(pages)
            .collect();
    for file in &files {
        let path = docs.join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for link in text.split("](").skip(1).filter_map(|rest| rest.split(')').next()) {
            let target = link.split('#').next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let resolved = path.parent().unwrap().join(target);
            assert!(resolved.exists(), "{file} links to {link}, which is not installed");
            checked += 1;
        }
    }
    assert!(checked >= 5, "only {checked} links checked");
}

#[test]
fn the_deb_holds_the_files_at_their_places_and_config_toml_as_a_conffile() {
    let Some(dist) = dist() else { return };
    let deb = format!("gpurun_{VERSION}_amd64.deb");
    let listing = output("dpkg-deb", &["-c", &deb], &dist);
    for file in PACKAGE_FILES {
        // Debian's policy: man pages are compressed.
        let shipped =
            |line: &str| line.ends_with(&format!(".{file}")) || line.ends_with(&format!(".{file}.gz"));
        assert!(listing.lines().any(shipped), "{file} not in {deb}:\n{listing}");
    }
    let control = output("dpkg-deb", &["-f", &deb], &dist);
    assert!(control.contains(&format!("Version: {VERSION}\n")), "{control}");
    let depends =
        control.lines().filter(|line| line.starts_with("Depends:") || line.starts_with("Recommends:"));
    for line in depends {
        assert!(!line.to_lowercase().contains("nvidia"), "no dependency on a driver package: {line}");
    }
    let unpacked = tempfile::tempdir().unwrap();
    output("dpkg-deb", &["-e", &deb, unpacked.path().to_str().unwrap()], &dist);
    let conffiles = std::fs::read_to_string(unpacked.path().join("conffiles")).unwrap_or_default();
    assert!(conffiles.lines().any(|line| line == "/etc/gpurun/config.toml"), "conffiles: {conffiles:?}");
}

#[test]
fn the_rpm_holds_the_files_at_their_places_and_config_toml_as_a_config_file() {
    let Some(dist) = dist() else { return };
    if !common::on_path("rpm") {
        return skip("the .rpm's contents", "rpm is not installed (tests/dist/install.sh installs it)");
    }
    let rpm = format!("gpurun-{VERSION}-1.x86_64.rpm");
    let listing = output("rpm", &["-qlp", &rpm], &dist);
    for file in PACKAGE_FILES {
        assert!(listing.lines().any(|line| line == *file), "{file} not in {rpm}:\n{listing}");
    }
    let config = output("rpm", &["-qcp", &rpm], &dist);
    assert!(config.lines().any(|line| line == "/etc/gpurun/config.toml"), "config files: {config}");
    let requires = output("rpm", &["-qRp", &rpm], &dist);
    assert!(!requires.to_lowercase().contains("nvidia"), "no dependency on a driver package:\n{requires}");
    // RHEL/CentOS 7's rpm 4.11 reads gzip and xz payloads, not zstd.
    assert!(!requires.contains("PayloadIsZstd"), "a zstd payload CentOS 7 cannot read:\n{requires}");
}

/// The newest glibc symbol version a binary asks for is at most 2.17.
fn assert_glibc_2_17(binary: &std::path::Path, dist: &std::path::Path) {
    let symbols = output("objdump", &["-T", binary.to_str().unwrap()], dist);
    let newest = symbols
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|word| word.strip_prefix("GLIBC_"))
        .filter_map(|version| {
            let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
        })
        .max();
    assert!(newest.is_some_and(|v| v <= (2, 17)), "{} needs GLIBC_{newest:?}, above 2.17", binary.display());
}

/// make test-gpu for a GPU machine without a toolchain: gpurun, cuda-hold, the checks and the
/// wheel in one folder; cuda-hold runs here and says what it lacks (no driver), and check.sh is the clone's.
#[test]
fn the_gpu_check_kit_holds_what_make_test_gpu_needs() {
    let Some(dist) = dist() else { return };
    let unpacked = tempfile::tempdir().unwrap();
    let kit = dist.join(format!("gpurun-gpu-check-{VERSION}-x86_64-linux-gnu.tar.gz"));
    output("tar", &["-xzf", kit.to_str().unwrap(), "-C", unpacked.path().to_str().unwrap()], &dist);
    let root = unpacked.path().join(format!("gpurun-gpu-check-{VERSION}"));
    for file in ["gpurun", "cuda-hold", "check.sh"] {
        assert!(root.join(file).is_file(), "{file} is not in the kit");
    }
    // The wheel, for check.sh's pip check.
    let wheels = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".whl"));
    assert_eq!(wheels.count(), 1, "the kit holds no wheel");
    let packed = std::fs::read_to_string(root.join("check.sh")).unwrap();
    let clone =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gpu/check.sh")).unwrap();
    assert!(
        packed == clone,
        "the kit's check.sh is not tests/gpu/check.sh (dist/ older than the clone: make dist)"
    );
    assert_glibc_2_17(&root.join("cuda-hold"), &dist);
    // Here, without a GPU: one line naming what failed (no libcuda.so.1, or CUDA's error).
    let here = Command::new(root.join("cuda-hold")).args(["--hold", "0"]).output().unwrap();
    let said = String::from_utf8_lossy(&here.stderr);
    assert!(here.status.code() == Some(1) && said.starts_with("cuda-hold: "), "{:?} {said}", here.status);
}

/// What /run/lock/gpurun is after `script configure` runs in a private mount namespace (a
/// fresh /run/lock, and /etc/tmpfiles.d holding the package's entry when `with_entry`),
/// with `before` (a shell line) run first: its mode and owner, as `stat -c '%a %u'`.
fn lock_dir_after_postinst(script: &Path, entry: &Path, with_entry: bool, before: &str) -> String {
    let setup = if with_entry {
        format!("mount -t tmpfs none /etc/tmpfiles.d && cp '{}' /etc/tmpfiles.d/ &&", entry.display())
    } else {
        // No entry anywhere systemd-tmpfiles looks: the script's own mkdir.
        "mount -t tmpfs none /etc/tmpfiles.d && mount -t tmpfs none /usr/lib/tmpfiles.d &&".to_owned()
    };
    let line = format!(
        "mount --make-rprivate / && mount -t tmpfs none /run/lock && {setup} {before} sh '{}' configure && stat -c '%a %u' /run/lock/gpurun",
        script.display()
    );
    let out = Command::new("unshare").args(["-m", "sh", "-c", &line]).output().unwrap();
    assert!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The packages create the lock directory when they are installed (postinst, %post), from
/// their tmpfiles entry, so the first user to run gpurun does not make it theirs: mode 1777,
/// root's, also over a directory a user made before the install. The .rpm's %post is the
/// .deb's postinst.
#[test]
fn the_packages_create_the_lock_directory_at_install() {
    let Some(dist) = dist() else { return };
    if !common::is_root() || !common::on_path("unshare") {
        return skip("the packages' install scripts", "needs root and unshare, for a private /run/lock");
    }
    let unpacked = tempfile::tempdir().unwrap();
    let deb = format!("gpurun_{VERSION}_amd64.deb");
    output("dpkg-deb", &["-R", &deb, unpacked.path().to_str().unwrap()], &dist);
    let postinst = unpacked.path().join("DEBIAN/postinst");
    let entry = unpacked.path().join("usr/lib/tmpfiles.d/gpurun.conf");
    assert_eq!(lock_dir_after_postinst(&postinst, &entry, true, ""), "1777 0");
    assert_eq!(
        lock_dir_after_postinst(
            &postinst,
            &entry,
            true,
            "mkdir -m 755 /run/lock/gpurun && chown 4242 /run/lock/gpurun &&"
        ),
        "1777 0",
        "a lock directory a user made before the install is put right"
    );
    assert_eq!(lock_dir_after_postinst(&postinst, &entry, false, ""), "1777 0", "without the entry");
    // A link planted at the path is left alone, and said (issue 65).
    let planted = format!(
        "mount --make-rprivate / && mount -t tmpfs none /run/lock && ln -s /etc /run/lock/gpurun && sh '{}' configure",
        postinst.display()
    );
    let out = Command::new("unshare").args(["-m", "sh", "-c", &planted]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/run/lock/gpurun is not a directory"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if common::on_path("rpm") {
        let scripts = output("rpm", &["-qp", "--scripts", &format!("gpurun-{VERSION}-1.x86_64.rpm")], &dist);
        let shipped = std::fs::read_to_string(&postinst).unwrap();
        assert!(scripts.contains(shipped.trim()), "the .rpm's %post is not the postinst:\n{scripts}");
    }
}

/// Reproducible artefacts: every file of the tarball, the .deb and the .rpm carries one time,
/// the last commit's (SOURCE_DATE_EPOCH), and nothing of the machine or the moment (the .rpm's
/// build time is that time, its build host a fixed word), so that `make dist` twice gives the
/// same SHA256SUMS.
#[test]
fn every_artefact_carries_one_time_so_the_same_commit_packs_the_same_bytes() {
    let Some(dist) = dist() else { return };
    let tarball = format!("gpurun-{VERSION}-x86_64-linux-gnu.tar.gz");
    let times = |listing: &str| -> std::collections::BTreeSet<String> {
        // `tar -tv` and `dpkg-deb -c`: mode owner size date time name.
        listing
            .lines()
            .filter_map(|line| line.split_whitespace().nth(3).zip(line.split_whitespace().nth(4)))
            .map(|(d, t)| format!("{d} {t}"))
            .collect()
    };
    let in_tarball = times(&output("tar", &["-tvzf", &tarball], &dist));
    let in_deb = times(&output("dpkg-deb", &["-c", &format!("gpurun_{VERSION}_amd64.deb")], &dist));
    assert_eq!(in_tarball.len(), 1, "{in_tarball:?}");
    assert_eq!(in_tarball, in_deb);
    // gzip keeps no name or time of its own (-n): bytes 4-7 of the header are zero.
    let header = std::fs::read(dist.join(&tarball)).unwrap();
    assert_eq!(&header[4..8], &[0, 0, 0, 0]);
    if common::on_path("rpm") {
        let rpm = format!("gpurun-{VERSION}-1.x86_64.rpm");
        let info = output("rpm", &["-qp", "--queryformat", "%{BUILDTIME} %{BUILDHOST}", &rpm], &dist);
        assert!(info.ends_with(" reproducible"), "{info}");
        let built: i64 = info.split(' ').next().unwrap().parse().unwrap();
        let files = output("rpm", &["-qp", "--queryformat", "[%{FILEMTIMES}\n]", &rpm], &dist);
        assert!(files.lines().all(|mtime| mtime.parse::<i64>().unwrap() == built), "{files}");
    }
}

/// The PyPI wheel: into a fresh virtual environment with pip (offline), `gpurun` is on its
/// bin/ and runs on the simulator, the man page and completions are under its share/, and
/// `pip uninstall` takes every file away again.
#[test]
fn the_wheel_installs_with_pip_runs_and_uninstalls_leaving_no_file() {
    let Some(dist) = dist() else { return };
    let wheel = format!("gpurun-{VERSION}-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl");
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    assert!(sums.lines().any(|line| line.ends_with(&format!("  {wheel}"))), "{sums}");
    let venv = tempfile::tempdir().unwrap();
    let root = venv.path().to_str().unwrap();
    output("python3", &["-m", "venv", root], &dist);
    let files = || -> Vec<String> {
        let mut found = Vec::new();
        let mut stack = vec![venv.path().to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                match entry.file_type().unwrap().is_dir() {
                    true => stack.push(entry.path()),
                    false => found.push(entry.path().display().to_string()),
                }
            }
        }
        found.sort();
        found
    };
    let before = files();
    let pip = format!("{root}/bin/pip");
    output(&pip, &["install", "--no-index", "--disable-pip-version-check", "--quiet", &wheel], &dist);
    let gpurun = format!("{root}/bin/gpurun");
    assert_eq!(output(&gpurun, &["--version"], &dist), format!("gpurun {VERSION}\n"));
    for shipped in [
        "share/man/man1/gpurun.1",
        "share/bash-completion/completions/gpurun",
        "share/zsh/site-functions/_gpurun",
    ] {
        assert!(venv.path().join(shipped).exists(), "{shipped} not installed");
    }
    let sim = Sim::new(&default_scenario());
    sim.gpurun_command(&gpurun, &["--list"]).run().status(0).stdout_has("8 GPUs");
    // `python -m gpurun`, where the venv's bin/ is not on PATH (a Jupyter kernel's environment):
    // the binary itself runs, with its status and its stdout (issue 66).
    let python = format!("{root}/bin/python");
    let by_module =
        sim.gpurun_command(&python, &["-m", "gpurun", "--list"]).env("PATH", "/usr/bin:/bin").run();
    by_module.status(0).stdout_has("8 GPUs");
    sim.gpurun_command(&python, &["-m", "gpurun", "--gpus", "1", "--", "sh", "-c", "exit 7"])
        .env("PATH", "/usr/bin:/bin")
        .run()
        .status(7);
    output(&pip, &["uninstall", "--yes", "--quiet", "gpurun"], &dist);
    assert_eq!(files(), before, "pip uninstall left files behind");
}

/// An aarch64 release (the .deb, .rpm, tarball and wheel alike) needs that Rust standard
/// library: where it is not installed, make dist refuses at once, saying so, and touches
/// nothing (dist/ stays as it is).
#[test]
fn an_aarch64_release_is_refused_where_its_standard_library_is_missing() {
    let installed = Command::new("rustup").args(["target", "list", "--installed"]).output();
    if installed.is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("aarch64-unknown-linux-gnu")) {
        return skip("the aarch64 refusal", "the aarch64 standard library is installed here");
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let refused =
        Command::new(root.join("packaging/dist.sh")).arg("aarch64-unknown-linux-gnu.2.17").output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("no Rust standard library for aarch64-unknown-linux-gnu here"),
        "{refused:?}"
    );
}
