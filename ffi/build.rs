//! Gives the shared library a SONAME, so programs linked against
//! `libmistri_locks.so` record `libmistri_locks.so.0` and keep working across
//! compatible upgrades. Only link arguments are emitted; nothing is written
//! into the source tree.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" || os == "android" || os.ends_with("bsd") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmistri_locks.so.0");
    }
}
