# gpurun: the two commands a newcomer needs are `make demo` and `make test` (see README.md).

CARGO  ?= cargo
PREFIX ?= /usr/local
DESTDIR ?=
PYTHON ?= python3
# The tmpfiles entry (the lock directory at boot): systemd-tmpfiles reads /usr/lib/tmpfiles.d
# whatever PREFIX is, so it is installed only for a system prefix (/usr, /usr/local) or where
# TMPFILESDIR says; a user's PREFIX=~/.local, or a private /opt prefix, never writes outside it.
ifeq ($(origin TMPFILESDIR),undefined)
TMPFILESDIR := $(if $(filter /usr /usr/ /usr/local /usr/local/,$(PREFIX)),/usr/lib/tmpfiles.d)
endif
# The simulator is checked against NVIDIA's own Python binding, NVIDIA's nvml.h (shipped in
# nvidia-nvml-dev) and two real clients, all pinned here.
NVIDIA_ML_PY_VERSION ?= 13.615.71
NVIDIA_NVML_DEV_VERSION ?= 13.5.37
GPUSTAT_VERSION ?= 1.1.1
# The Prometheus text parser the --prom-file receipt is checked with.
PROMETHEUS_CLIENT_VERSION ?= 0.21.1
# AMD's own Python bindings of AMD SMI (ROCm 7.0.2's amdsmi.h), which the AMD SMI simulator is
# checked against.
AMDSMI_VERSION ?= 7.0.2
# The real Jupyter client and kernel, which start, interrupt and restart a kernel spec that
# gpurun --jupyter-kernel writes.
JUPYTER_CLIENT_VERSION ?= 8.6.3
IPYKERNEL_VERSION ?= 6.29.5

VENV := .venv
BENCH_VENV := .venv-bench
# nvitop's nvisel, the incumbent the benchmark compares against.
NVITOP_VERSION ?= 1.7.2
SIM_DIR := target/sim

FUZZ_RUNS ?= 5000

.PHONY: fuzz setup build sim demo demo-amd demo-container mutants test install-notice test-gpu venv slurm-deps mpi-deps container-deps emulation-deps dist-deps dist wheel shells man lint install install-files uninstall clean bench

# For working on gpurun: git runs .githooks/ (commit-msg: a subject of one whole sentence, at
# most 72 characters).
setup:
	git config core.hooksPath .githooks

build:
	$(CARGO) build --release --bin gpurun

# The simulated libnvidia-ml.so.1 and libamd_smi.so, sim-cuda and sim-hip, as debug builds
# (the tests use these).
sim:
	$(CARGO) build --workspace --bins --lib
	mkdir -p $(SIM_DIR)
	ln -sf ../debug/libnvml_sim.so $(SIM_DIR)/libnvidia-ml.so.1
	ln -sf ../debug/libamdsmi_sim.so $(SIM_DIR)/libamd_smi.so

# Build everything, show what gpurun sees on the bundled simulated 8-GPU server, and run the
# simulated CUDA program on the two GPUs gpurun chooses.
demo: sim
	$(CARGO) build --quiet --bin gpurun
	target/debug/gpurun --nvml-lib $(SIM_DIR)/libnvidia-ml.so.1 --list
	@echo
	target/debug/gpurun --nvml-lib $(SIM_DIR)/libnvidia-ml.so.1 --gpus 2 --min-free 8G --report -- target/debug/sim-cuda --mem 4GiB --sleep 1

# The same on AMD Instinct GPUs: gpurun --list on a simulated 8 x MI300X server (AMD SMI), and a
# simulated HIP program on the two GPUs gpurun chooses (ROCR_VISIBLE_DEVICES, then verified).
demo-amd: sim
	$(CARGO) build --quiet --bin gpurun
	target/debug/gpurun --vendor amd --amd-smi-lib $(SIM_DIR)/libamd_smi.so --list
	@echo
	target/debug/gpurun --vendor amd --amd-smi-lib $(SIM_DIR)/libamd_smi.so --gpus 2 --min-free 8G --report -- target/debug/sim-hip --mem 4GiB --sleep 1

# The same job in a container, without a GPU: podman runs a busybox image on the simulated GPUs
# through a CDI spec (root, podman and runc; tests/containers/try.sh says what it sets up).
demo-container: sim
	tests/containers/try.sh

# Rebuilt when the pins above change.
$(VENV)/.installed: Makefile
	@echo "make test: creating $(VENV) with nvidia-ml-py, nvidia-nvml-dev, gpustat, nvitop, prometheus-client, amdsmi, jupyter_client and ipykernel (pip; minutes on a slow machine, once)"
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		nvidia-ml-py==$(NVIDIA_ML_PY_VERSION) nvidia-nvml-dev==$(NVIDIA_NVML_DEV_VERSION) \
		gpustat==$(GPUSTAT_VERSION) nvitop==$(NVITOP_VERSION) \
		prometheus-client==$(PROMETHEUS_CLIENT_VERSION) amdsmi==$(AMDSMI_VERSION) \
		jupyter_client==$(JUPYTER_CLIENT_VERSION) ipykernel==$(IPYKERNEL_VERSION)
	touch $@

venv: $(VENV)/.installed

# Debian's Slurm and MUNGE for tests/slurm.rs, installed when missing (as root; elsewhere the
# Slurm tests say why they skip).
slurm-deps:
	@tests/slurm/cluster.sh install || [ $$? -eq 3 ]

# Open MPI's mpirun for tests/ranks.rs, installed when missing (as root).
mpi-deps:
	@tests/mpi/install.sh

# podman, runc and a static busybox for tests/containers.rs, installed when missing (as root).
container-deps:
	@tests/containers/install.sh

# valgrind and qemu-user-static for tests/emulation.rs, installed when missing (as root).
emulation-deps:
	@tests/emulation/install.sh

# rpm for tests/dist.rs (rpm -qlp on the .rpm make dist builds), installed when missing (as root).
dist-deps:
	@tests/dist/install.sh

# The release artefacts in dist/: a tarball whose binary needs glibc 2.17 at most (cargo-zigbuild
# with zig from PyPI), a .deb (dpkg-deb) and an .rpm (rpmbuild), and SHA256SUMS, the same bytes
# for the same commit. cargo-zigbuild is installed into .venv-dist on first use. DIST_TARGET=
# aarch64-unknown-linux-gnu.2.17 where that Rust standard library is installed.
DIST_TARGET ?= x86_64-unknown-linux-gnu.2.17
dist:
	@CARGO=$(CARGO) PYTHON=$(PYTHON) packaging/dist.sh $(DIST_TARGET)

# The PyPI wheel (pip install dist/gpurun-*.whl): make dist makes it with the other artefacts.
wheel: dist

# Every test: unit, integration through the real binary and the simulator, the simulator
# checked against nvidia-ml-py, and gpurun inside a real single-node Slurm.
# zsh and fish, to check the completion scripts with the shells themselves (as root, when missing).
shells:
	@tests/completions/install-shells.sh

# NO_INSTALL=1: no Debian package is installed (the tests that need one skip, saying why).
NO_INSTALL ?=
export NO_INSTALL

test: install-notice venv sim slurm-deps mpi-deps container-deps emulation-deps dist-deps shells dist
	@CARGO=$(CARGO) tests/run-all.sh

# Said once, before anything is installed system-wide.
install-notice:
	@if [ "$$(id -u)" = 0 ] && [ -z "$(filter-out 0,$(NO_INSTALL))" ]; then \
		echo "make test: as root, installs the Debian packages its tests need when missing (Slurm, MUNGE, Open MPI, podman, runc, busybox-static, valgrind, qemu-user-static, rpm, zsh, fish); make test NO_INSTALL=1 installs none"; \
	fi

$(BENCH_VENV)/.installed:
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check nvitop==$(NVITOP_VERSION)
	touch $@

# Mutation testing: cargo-mutants (from crates.io into target/mutants-tools, once) changes the
# decisions of the code one at a time and runs the tests that cover them; a mutant that no test
# notices is a decision nothing pins. Slow on two cores (an hour or more for the whole tree), so
# never in CI: MUTANTS_FILE=src/options/duration.rs for one file (or several, space-separated),
# MUTANTS_TESTS=--lib (the default: the unit tests, minutes per file) or MUTANTS_TESTS="--test
# tests" for the binary's; MUTANTS_ARGS=--iterate tests only what the last run did not catch.
CARGO_MUTANTS_VERSION = 27.1.0
MUTANTS_TOOLS = target/mutants-tools
MUTANTS_FILE ?=
MUTANTS_TESTS ?= --lib
MUTANTS_ARGS ?=
mutants:
	@if ! $(MUTANTS_TOOLS)/bin/cargo-mutants mutants --version 2>/dev/null | grep -q " $(CARGO_MUTANTS_VERSION)$$"; then \
		echo "make mutants: installing cargo-mutants $(CARGO_MUTANTS_VERSION) into $(MUTANTS_TOOLS) (once)"; \
		$(CARGO) install --quiet --locked --root $(MUTANTS_TOOLS) --version $(CARGO_MUTANTS_VERSION) cargo-mutants; \
	fi
	$(MUTANTS_TOOLS)/bin/cargo-mutants mutants --package gpurun $(foreach f,$(MUTANTS_FILE),--file $(f)) \
		--output target/mutants $(MUTANTS_ARGS) -- $(MUTANTS_TESTS)

# Speed and memory, measured (release builds, the simulator, nvisel side by side); about 2 min.
# BENCH_ARGS=--quick for a shorter run. Results: target/bench/bench.json. BENCH_BEFORE names an
# older commit whose launch is measured beside this one's (built once into target/before; empty:
# none, as outside a git checkout).
BENCH_BEFORE ?= c31c9fa
BEFORE_BIN := target/before/$(BENCH_BEFORE)/target/release/gpurun
bench: $(BENCH_VENV)/.installed
	$(CARGO) build --release --workspace --bins --lib
	@if [ -n "$(BENCH_BEFORE)" ] && [ ! -x $(BEFORE_BIN) ] && git rev-parse -q --verify "$(BENCH_BEFORE)^{commit}" >/dev/null 2>&1; then \
		echo "make bench: building $(BENCH_BEFORE) into target/before (once)"; \
		mkdir -p target/before/$(BENCH_BEFORE) && git archive $(BENCH_BEFORE) | tar -x -C target/before/$(BENCH_BEFORE) && \
		(cd target/before/$(BENCH_BEFORE) && $(CARGO) build --quiet --release -p gpurun --bin gpurun); \
	fi
	before=""; if [ -n "$(BENCH_BEFORE)" ] && [ -x $(BEFORE_BIN) ]; then before="--before $(BEFORE_BIN)"; fi; \
	target/release/gpurun-bench --nvisel $(BENCH_VENV)/bin/nvisel --out target/bench/bench.json $$before $(BENCH_ARGS)

# Random invocations (options, values, environment, configuration files) against the simulated
# GPUs, looking for panics (tests/fuzz/fuzz.py). Not part of `make test`: minutes of CPU.
fuzz: sim
	$(CARGO) build
	$(PYTHON) tests/fuzz/fuzz.py --gpurun target/debug/gpurun --library $(SIM_DIR)/libnvidia-ml.so.1 \
		--scenario crates/nvml-sim/scenarios/default.toml --runs $(FUZZ_RUNS) $(FUZZ_ARGS)

# What only a real GPU can show (a PyTorch job landing on the chosen card, verified). CI has no
# GPU and never runs it.
test-gpu:
	tests/gpu/check.sh

man:
	GPURUN_BLESS=1 $(CARGO) test --test tests man_page

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

install: build
	$(MAKE) install-files BIN=target/release/gpurun

# What install-files put under PREFIX (and DESTDIR), and nothing else.
uninstall:
	rm -f "$(DESTDIR)$(PREFIX)/bin/gpurun" "$(SHARE)/man/man1/gpurun.1" "$(SHARE)/bash-completion/completions/gpurun" \
		"$(SHARE)/zsh/site-functions/_gpurun" "$(SHARE)/fish/vendor_completions.d/gpurun.fish"
	rm -rf "$(SHARE)/doc/gpurun"
	@if [ -n "$(TMPFILESDIR)" ]; then rm -f "$(DESTDIR)$(TMPFILESDIR)/gpurun.conf"; fi

# What `install` puts in place, from the binary BIN (tests/completions.rs installs a debug build
# into a scratch DESTDIR). Completions go where each shell looks for them.
BIN ?= target/release/gpurun
SHARE = $(DESTDIR)$(PREFIX)/share
install-files:
	install -D -m 0755 "$(BIN)" "$(DESTDIR)$(PREFIX)/bin/gpurun"
	install -D -m 0644 man/gpurun.1 "$(SHARE)/man/man1/gpurun.1"
	@if [ -n "$(TMPFILESDIR)" ]; then \
		install -D -m 0644 packaging/gpurun-tmpfiles.conf "$(DESTDIR)$(TMPFILESDIR)/gpurun.conf"; \
		if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v systemd-tmpfiles >/dev/null; then \
			systemd-tmpfiles --create "$(TMPFILESDIR)/gpurun.conf" || true; \
		fi; \
	else \
		echo "tmpfiles entry not installed: PREFIX=$(PREFIX) is not /usr or /usr/local (TMPFILESDIR=DIR installs it); gpurun makes /run/lock/gpurun on first use"; \
	fi
	install -D -m 0644 packaging/config.toml "$(SHARE)/doc/gpurun/config.toml"
	install -m 0644 README.md "$(SHARE)/doc/gpurun/"
	# As in the source tree, so that the docs' links between them resolve where installed.
	install -D -m 0644 -t "$(SHARE)/doc/gpurun/doc" doc/guide.md doc/design.md doc/performance.md doc/development.md
	install -D -m 0644 -t "$(SHARE)/doc/gpurun/doc/guide" doc/guide/*.md
	install -d "$(SHARE)/bash-completion/completions" "$(SHARE)/zsh/site-functions" "$(SHARE)/fish/vendor_completions.d"
	"$(BIN)" --completions bash > "$(SHARE)/bash-completion/completions/gpurun"
	"$(BIN)" --completions zsh > "$(SHARE)/zsh/site-functions/_gpurun"
	"$(BIN)" --completions fish > "$(SHARE)/fish/vendor_completions.d/gpurun.fish"

clean:
	$(CARGO) clean
	rm -rf $(VENV) $(BENCH_VENV) .venv-dist dist
