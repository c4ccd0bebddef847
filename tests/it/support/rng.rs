//! A seeded RNG for the suites that schedule faults or mutate inputs, replayable with
//! `Q_A2A_TEST_SEED`.

/// The seed to use: `Q_A2A_TEST_SEED` when set (to replay a run), otherwise the clock.
pub fn seed() -> u64 {
    match std::env::var("Q_A2A_TEST_SEED") {
        Ok(v) => v.parse().expect("Q_A2A_TEST_SEED must be an integer"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}

/// SplitMix64: small, seedable, good enough to schedule faults reproducibly.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (`hi` exclusive, `hi > lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo)
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.range(0, items.len() as u64) as usize]
    }
}
