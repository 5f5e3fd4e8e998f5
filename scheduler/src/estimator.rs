//! Run-time estimates learned online from completed work, so backfill and reservations have
//! something better than a 24-hour guess when users give no estimate (most do not: the Philly
//! trace has none).
//!
//! Pure and deterministic like the rest of the core: the caller feeds completions in a
//! deterministic order (the leader in log order from replicated state, the simulator in
//! event order), and every node that fed the same completions answers the same estimate.
//! Completions are kept per key, from the most specific to the least: user and name prefix
//! and GPU count, user and GPU count, queue and GPU count, queue. An estimate comes from
//! the most specific key with enough samples, as a high percentile of its recent run times
//! (a conservative estimate: backfill that ends late delays a reservation), never above the
//! workload's own `runtimeLimitSeconds`.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use tideway_api::Workload;

/// How the estimator learns and answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct EstimatorConfig {
    /// The percentile of recent run times to answer (1..=100).
    pub percentile: u8,
    /// Recent run times kept per key; older ones are forgotten so estimates follow change.
    pub window: usize,
    /// Samples a key needs before it answers.
    pub min_samples: usize,
}

impl Default for EstimatorConfig {
    fn default() -> Self {
        Self {
            percentile: 80,
            window: 32,
            min_samples: 3,
        }
    }
}

/// Which key an estimate came from, most specific first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EstimateBasis {
    UserNameGpus,
    UserGpus,
    QueueGpus,
    Queue,
}

const BASES: [EstimateBasis; 4] = [
    EstimateBasis::UserNameGpus,
    EstimateBasis::UserGpus,
    EstimateBasis::QueueGpus,
    EstimateBasis::Queue,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    pub seconds: u64,
    pub basis: EstimateBasis,
    /// Completions the answer was computed from.
    pub samples: usize,
}

/// The learned state: recent run times per key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeEstimator {
    pub config: EstimatorConfig,
    keys: BTreeMap<String, VecDeque<u64>>,
}

/// A job name without its run number: `llama-ft-run-0042` and `llama-ft-run-0043` are the
/// same kind of work. Public because callers that group workloads by what the core sees of
/// them must group by it too.
pub fn name_prefix(name: &str) -> &str {
    name.trim_end_matches(|c: char| c.is_ascii_digit() || matches!(c, '-' | '_' | '.'))
}

fn key(basis: EstimateBasis, w: &Workload) -> Option<String> {
    let gpus = w
        .spec
        .pod_sets
        .iter()
        .fold(0u64, |a, p| a.saturating_add(p.total_gpus()));
    let queue = &w.spec.queue;
    let user = w.spec.user.as_deref();
    // Separators that cannot occur in names keep keys of different bases apart.
    match basis {
        EstimateBasis::UserNameGpus => user.map(|u| {
            format!(
                "u\u{1f}{u}\u{1f}{}\u{1f}{gpus}",
                name_prefix(&w.metadata.name)
            )
        }),
        EstimateBasis::UserGpus => user.map(|u| format!("v\u{1f}{u}\u{1f}{gpus}")),
        EstimateBasis::QueueGpus => Some(format!("q\u{1f}{queue}\u{1f}{gpus}")),
        EstimateBasis::Queue => Some(format!("r\u{1f}{queue}")),
    }
}

impl RuntimeEstimator {
    pub fn new(config: EstimatorConfig) -> Self {
        Self {
            config,
            keys: BTreeMap::new(),
        }
    }

    /// Learns that `w` ran for `seconds` (to completion, or to its limit).
    pub fn observe(&mut self, w: &Workload, seconds: u64) {
        let window = self.config.window.max(1);
        for basis in BASES {
            if let Some(k) = key(basis, w) {
                let samples = self.keys.entry(k).or_default();
                if samples.len() >= window {
                    samples.pop_front();
                }
                samples.push_back(seconds);
            }
        }
    }

    /// The learned estimate for `w`, if any key it falls under has enough samples.
    pub fn estimate(&self, w: &Workload) -> Option<Estimate> {
        let min = self.config.min_samples.max(1);
        let pct = u64::from(self.config.percentile.clamp(1, 100));
        for basis in BASES {
            let Some(samples) = key(basis, w).and_then(|k| self.keys.get(&k)) else {
                continue;
            };
            if samples.len() < min {
                continue;
            }
            let mut sorted: Vec<u64> = samples.iter().copied().collect();
            sorted.sort_unstable();
            // Nearest rank: the smallest value with at least pct% of samples at or below it.
            let rank = (pct * sorted.len() as u64).div_ceil(100).max(1) as usize;
            let seconds = sorted[rank.min(sorted.len()) - 1];
            let seconds = w
                .spec
                .runtime_limit_seconds
                .map_or(seconds, |l| seconds.min(l));
            return Some(Estimate {
                seconds,
                basis,
                samples: sorted.len(),
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::{PodSet, WorkloadClass, WorkloadSpec};

    use super::*;

    fn job(name: &str, user: Option<&str>, queue: &str, gpus: u32) -> Workload {
        let mut spec = WorkloadSpec::new(
            queue,
            WorkloadClass::Training,
            vec![PodSet::new("w", 1, gpus, "H100")],
        );
        spec.user = user.map(Into::into);
        Workload::new(name, spec)
    }

    #[test]
    fn answers_a_high_percentile_of_the_most_specific_key() {
        let mut e = RuntimeEstimator::default();
        let w = job("train-run-7", Some("ann"), "q", 8);
        assert_eq!(e.estimate(&w), None);
        for (i, s) in [100, 200, 300, 400, 500].into_iter().enumerate() {
            e.observe(&job(&format!("train-run-{i}"), Some("ann"), "q", 8), s);
        }
        // Someone else's jobs in the same queue do not change ann's answer.
        for _ in 0..10 {
            e.observe(&job("other", Some("bob"), "q", 8), 9_000);
        }
        let got = e.estimate(&w).unwrap();
        assert_eq!(got.basis, EstimateBasis::UserNameGpus);
        assert_eq!(got.seconds, 400, "80th percentile of 5 samples");
        assert_eq!(got.samples, 5);
        // A new user of the queue falls back to the queue's jobs of that size.
        let new = e.estimate(&job("x", Some("cy"), "q", 8)).unwrap();
        assert_eq!(new.basis, EstimateBasis::QueueGpus);
        assert_eq!(new.seconds, 9_000);
        // Another size: the queue as a whole.
        assert_eq!(
            e.estimate(&job("x", None, "q", 1)).unwrap().basis,
            EstimateBasis::Queue
        );
    }

    #[test]
    fn follows_change_and_respects_the_limit() {
        let mut e = RuntimeEstimator::new(EstimatorConfig {
            percentile: 100,
            window: 3,
            min_samples: 1,
        });
        let mut w = job("a", Some("ann"), "q", 1);
        for s in [10_000, 50, 60, 70] {
            e.observe(&w, s);
        }
        assert_eq!(
            e.estimate(&w).unwrap().seconds,
            70,
            "the old outlier left the window"
        );
        w.spec.runtime_limit_seconds = Some(65);
        assert_eq!(e.estimate(&w).unwrap().seconds, 65);
    }

    #[test]
    fn same_completions_same_state_and_round_trip() {
        let mut a = RuntimeEstimator::default();
        let mut b = RuntimeEstimator::default();
        for i in 0..20u64 {
            let w = job(&format!("j-{i}"), Some("u"), "q", (i % 3) as u32 + 1);
            a.observe(&w, i * 37);
            b.observe(&w, i * 37);
        }
        assert_eq!(a, b);
        let back: RuntimeEstimator =
            serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back, a);
    }

    #[test]
    fn name_prefix_drops_run_numbers() {
        assert_eq!(name_prefix("llama-ft-run-0042"), "llama-ft-run");
        assert_eq!(name_prefix("eval_3.1"), "eval");
        assert_eq!(name_prefix("42"), "");
    }
}
