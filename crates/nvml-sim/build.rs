// The simulator must be loadable exactly like the real library (`dlopen("libnvidia-ml.so.1")`,
// which is also what NVIDIA's Python binding does), so give the cdylib the real soname.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
}
