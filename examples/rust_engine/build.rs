// Links libballast from an installed ballast: BALLAST_LIB_DIR is its lib/
// folder (the package's <prefix>/lib). The RUNPATH points there too, so the
// engine runs without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-env-changed=BALLAST_LIB_DIR");
    let dir = std::env::var("BALLAST_LIB_DIR").expect("set BALLAST_LIB_DIR to the lib/ folder of an installed ballast");
    println!("cargo:rustc-link-search=native={dir}");
    println!("cargo:rustc-link-lib=dylib=ballast");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
}
