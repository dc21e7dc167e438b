//! The integration tests, one binary (ripgrep's layout): each module is an area of DESIGN.md
//! tried through the real gpurun binary and the simulator; `common` is their harness. One area
//! runs alone, in a binary of its own: tests/reaping.rs, which reaps every child of its process.

mod common;

mod adversarial;
mod amd;
mod busy;
mod cli;
mod clients;
mod completions;
mod config;
mod containers;
mod dashboards;
mod dist;
mod doctor;
mod emulation;
mod env_s;
mod gpu_check;
mod health;
mod history;
mod holds;
mod hostile;
mod idle;
mod jupyter;
mod launch;
mod launchers;
mod layout;
mod leftovers;
mod list;
mod man_page;
mod mig;
mod mps;
mod not_supported;
mod numa;
mod nvml_hangs;
mod peers;
mod promises;
mod queue;
mod ranks;
mod real_machines;
mod receipt;
mod reserve;
mod select;
mod shared;
mod sim_vs_pynvml;
mod slurm;
mod terminal;
mod timeout;
mod topology;
mod unified;
mod verify;
