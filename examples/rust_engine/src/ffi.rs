//! The part of include/ballast/ballast.h this engine calls, declared by
//! hand (C API version 1). Struct layouts follow the header field for
//! field; every struct starts with `size`, set to its size_of.
#![allow(non_camel_case_types, dead_code)]
use std::os::raw::{c_char, c_int, c_void};

pub const BALLAST_C_API_VERSION: u32 = 1;
pub const BALLAST_PLAN_AUTOMATIC: c_int = 0;
pub const BALLAST_UPLOAD: c_int = 1;

#[repr(C)] pub struct ballast_status { _p: [u8; 0] }
#[repr(C)] pub struct ballast_model { _p: [u8; 0] }
#[repr(C)] pub struct ballast_backend { _p: [u8; 0] }
#[repr(C)] pub struct ballast_plan { _p: [u8; 0] }
#[repr(C)] pub struct ballast_residency { _p: [u8; 0] }
#[repr(C)] pub struct ballast_pin { _p: [u8; 0] }

#[repr(C)]
pub struct ballast_weight_info {
    pub size: usize, pub name: *const c_char, pub dtype: *const c_char, pub ndims: usize, pub dims: *const i64,
    pub bytes: u64, pub file: *const c_char, pub offset: u64,
}
#[repr(C)]
pub struct ballast_device_info {
    pub size: usize, pub backend: *const c_char, pub index: i32, pub name: *const c_char, pub uuid: *const c_char,
    pub driver: *const c_char, pub memory_bytes: u64, pub host_registration: i32, pub read_only_registration: i32,
    pub unaligned_operands: i32, pub guarded_host_reads: i32, pub import_alignment: u64, pub max_single_allocation: u64,
}
#[repr(C)]
pub struct ballast_derivation_info {
    pub size: usize, pub weight: *const c_char, pub kind: *const c_char, pub node: *const c_char,
    pub why: *const c_char, pub first_bytes: u64, pub second_bytes: u64,
}
#[repr(C)]
pub struct ballast_residency_options {
    pub size: usize, pub strategy: c_int, pub budget_bytes: u64, pub plan: *const ballast_plan, pub kinds: u32,
    pub no_derivations: i32, pub group_by_layer: *const c_char, pub overrides: *const c_void, pub override_count: usize,
}
#[repr(C)]
pub struct ballast_teardown { pub size: usize, pub bytes_freed: u64, pub allocations_freed: u64, pub failed_frees: u64 }
#[repr(C)]
pub struct ballast_value { pub size: usize, pub first: u64, pub second: u64, pub first_bytes: u64, pub second_bytes: u64 }

pub type ballast_progress_fn = Option<unsafe extern "C" fn(user: *mut c_void, done: usize, total: usize)>;

#[link(name = "ballast")]
extern "C" {
    pub fn ballast_status_code(s: *const ballast_status) -> c_int;
    pub fn ballast_status_message(s: *const ballast_status) -> *const c_char;
    pub fn ballast_status_free(s: *mut ballast_status);
    pub fn ballast_check_version(version: u32) -> *mut ballast_status;
    pub fn ballast_model_open(path: *const c_char, out: *mut *mut ballast_model) -> *mut ballast_status;
    pub fn ballast_model_free(m: *mut ballast_model) -> *mut ballast_status;
    pub fn ballast_model_weight_count(m: *const ballast_model, out: *mut usize) -> *mut ballast_status;
    pub fn ballast_model_weight(m: *const ballast_model, i: usize, out: *mut ballast_weight_info) -> *mut ballast_status;
    pub fn ballast_model_find_weight(m: *const ballast_model, name: *const c_char, i: *mut usize) -> *mut ballast_status;
    pub fn ballast_model_read_weight(m: *const ballast_model, i: usize, offset: u64, dst: *mut c_void, dst_length: usize,
                                     length: u64) -> *mut ballast_status;
    pub fn ballast_backend_open(config: *const c_char, out: *mut *mut ballast_backend) -> *mut ballast_status;
    pub fn ballast_backend_free(b: *mut ballast_backend) -> *mut ballast_status;
    pub fn ballast_backend_info(b: *const ballast_backend, out: *mut ballast_device_info) -> *mut ballast_status;
    pub fn ballast_plan_derivations(m: *const ballast_model, source: c_int, out: *mut *mut ballast_plan) -> *mut ballast_status;
    pub fn ballast_plan_free(p: *mut ballast_plan) -> *mut ballast_status;
    pub fn ballast_plan_count(p: *const ballast_plan, out: *mut usize) -> *mut ballast_status;
    pub fn ballast_plan_entry(p: *const ballast_plan, i: usize, out: *mut ballast_derivation_info) -> *mut ballast_status;
    pub fn ballast_residency_create(b: *mut ballast_backend, m: *const ballast_model, o: *const ballast_residency_options,
                                    out: *mut *mut ballast_residency) -> *mut ballast_status;
    pub fn ballast_residency_free(r: *mut ballast_residency) -> *mut ballast_status;
    pub fn ballast_residency_release(r: *mut ballast_residency, out: *mut ballast_teardown) -> *mut ballast_status;
    pub fn ballast_residency_derive_all(r: *mut ballast_residency, p: *const ballast_plan, progress: ballast_progress_fn,
                                        user: *mut c_void) -> *mut ballast_status;
    pub fn ballast_residency_pin_derivation(r: *mut ballast_residency, p: *const ballast_plan, i: usize,
                                            out: *mut *mut ballast_pin) -> *mut ballast_status;
    pub fn ballast_pin_free(p: *mut ballast_pin) -> *mut ballast_status;
    pub fn ballast_pin_value(p: *const ballast_pin, member: usize, out: *mut ballast_value) -> *mut ballast_status;
    pub fn ballast_pin_read(p: *const ballast_pin, member: usize, half: c_int, offset: u64, dst: *mut c_void,
                            dst_length: usize, length: u64) -> *mut ballast_status;
}
