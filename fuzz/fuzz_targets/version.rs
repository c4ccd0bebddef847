#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| q_a2a_gateway_fuzz::version(data));
