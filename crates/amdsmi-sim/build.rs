// Loadable exactly like the real library: AMD's Python binding and gpurun dlopen
// "libamd_smi.so", so the cdylib carries that soname.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libamd_smi.so");
}
