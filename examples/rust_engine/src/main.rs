//! A Rust engine on ballast's C API, declared by hand (src/ffi.rs): open a
//! model and a backend, upload the weights, derive every planned encoding,
//! read the transpose of a 2-D float weight back and check every element
//! against the weight as stored, release, free.
//!
//!   rust_engine MODEL BACKEND        e.g. rust_engine sample.onnx cpu
//! Exit: 0 ok, 1 a step failed or a check did not hold, 2 usage.
mod ffi;
use ffi::*;
use std::ffi::{CStr, CString};
use std::os::raw::c_void;
use std::ptr::null_mut;

/// A failed call as its message (the status freed), success as Ok.
fn check(s: *mut ballast_status, what: &str) -> Result<(), String> {
    if s.is_null() {
        return Ok(());
    }
    // SAFETY: a non-NULL status from ballast, read then freed once.
    let msg = unsafe { CStr::from_ptr(ballast_status_message(s)).to_string_lossy().into_owned() };
    unsafe { ballast_status_free(s) };
    Err(format!("{what}: {msg}"))
}

fn text(p: *const std::os::raw::c_char) -> String {
    unsafe { CStr::from_ptr(p).to_string_lossy().into_owned() }
}

macro_rules! init {
    ($t:ty) => {{
        let mut v: $t = std::mem::zeroed(); // inside run()'s unsafe block
        v.size = std::mem::size_of::<$t>();
        v
    }};
}

fn run(model_path: &str, config: &str) -> Result<(), String> {
    unsafe {
        check(ballast_check_version(BALLAST_C_API_VERSION), "version")?;
        let path = CString::new(model_path).map_err(|e| e.to_string())?;
        let config_c = CString::new(config).map_err(|e| e.to_string())?;
        let (mut model, mut backend, mut plan, mut res) = (null_mut(), null_mut(), null_mut(), null_mut());
        check(ballast_model_open(path.as_ptr(), &mut model), "open model")?;
        let mut weights = 0usize;
        check(ballast_model_weight_count(model, &mut weights), "weights")?;
        check(ballast_backend_open(config_c.as_ptr(), &mut backend), "open backend")?;
        let mut info = init!(ballast_device_info);
        check(ballast_backend_info(backend, &mut info), "device info")?;
        println!("model: {weights} weights; backend {config}: {}", text(info.name));

        check(ballast_plan_derivations(model, BALLAST_PLAN_AUTOMATIC, &mut plan), "plan")?;
        let mut options = init!(ballast_residency_options);
        options.strategy = BALLAST_UPLOAD;
        options.plan = plan;
        check(ballast_residency_create(backend, model, &options, &mut res), "residency")?;
        let mut done = 0usize;
        unsafe extern "C" fn progress(user: *mut c_void, d: usize, _total: usize) {
            *(user as *mut usize) = d;
        }
        check(ballast_residency_derive_all(res, plan, Some(progress), &mut done as *mut usize as *mut c_void), "derive")?;
        let mut n = 0usize;
        check(ballast_plan_count(plan, &mut n), "plan count")?;
        println!("derived {done} of {n}");

        // The first transposed 2-D float weight: every element checked.
        let mut checked = false;
        for i in 0..n {
            let mut d = init!(ballast_derivation_info);
            check(ballast_plan_entry(plan, i, &mut d), "plan entry")?;
            if text(d.kind) != "transpose" {
                continue;
            }
            let mut wi = 0usize;
            check(ballast_model_find_weight(model, d.weight, &mut wi), "find weight")?;
            let mut w = init!(ballast_weight_info);
            check(ballast_model_weight(model, wi, &mut w), "weight")?;
            if text(w.dtype) != "float" || w.ndims != 2 {
                continue;
            }
            let (rows, cols) = (*w.dims as usize, *w.dims.add(1) as usize);
            let mut stored = vec![0f32; rows * cols];
            let mut transposed = vec![0f32; rows * cols];
            let bytes = (rows * cols * 4) as u64;
            check(ballast_model_read_weight(model, wi, 0, stored.as_mut_ptr() as *mut c_void, bytes as usize, bytes), "read weight")?;
            let mut pin = null_mut();
            check(ballast_residency_pin_derivation(res, plan, i, &mut pin), "pin")?;
            let mut v = init!(ballast_value);
            check(ballast_pin_value(pin, 0, &mut v), "value")?;
            if v.first_bytes != bytes {
                return Err(format!("transpose has {} bytes, the weight {bytes}", v.first_bytes));
            }
            check(ballast_pin_read(pin, 0, 0, 0, transposed.as_mut_ptr() as *mut c_void, bytes as usize, bytes), "read value")?;
            check(ballast_pin_free(pin), "unpin")?;
            let mismatches = (0..rows)
                .flat_map(|r| (0..cols).map(move |c| (r, c)))
                .filter(|&(r, c)| transposed[c * rows + r].to_bits() != stored[r * cols + c].to_bits())
                .count();
            println!("transpose of {} [{rows}, {cols}]: {mismatches} mismatches", text(w.name));
            if mismatches != 0 {
                return Err("the value read back differs".into());
            }
            checked = true;
            break;
        }
        if !checked {
            return Err("the plan transposes no 2-D float weight".into());
        }
        let mut td = init!(ballast_teardown);
        check(ballast_residency_release(res, &mut td), "release")?;
        println!("teardown: {} bytes in {} allocations freed", td.bytes_freed, td.allocations_freed);
        check(ballast_residency_free(res), "free residency")?;
        check(ballast_plan_free(plan), "free plan")?;
        check(ballast_backend_free(backend), "free backend")?;
        check(ballast_model_free(model), "free model")?;
        // A freed handle is refused, not dereferenced.
        let s = ballast_model_weight_count(model, &mut weights);
        if ballast_status_code(s) != 64 {
            return Err("a freed model handle was not refused".into());
        }
        ballast_status_free(s);
        println!("rust engine: ok");
        Ok(())
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: {} MODEL BACKEND", args[0]);
        std::process::exit(2);
    }
    if let Err(e) = run(&args[1], &args[2]) {
        eprintln!("rust_engine: {e}");
        std::process::exit(1);
    }
}
