//! gpurun: run a command on the right NVIDIA GPU. The pipeline lives in `gpurun::run`.

fn main() -> std::process::ExitCode {
    gpurun::main_exit()
}
