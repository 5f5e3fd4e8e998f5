//! `GET /v1/usage`: GPU time per queue, tenant, flavor and day, split into guaranteed,
//! borrowed and idle, computed from the replicated usage ledger.
//!
//! Figures are whole GPU-seconds so that the identities a chargeback report must satisfy
//! hold exactly, not up to rounding: per flavor `used + idle = capacity + over`, and per
//! queue `guaranteed + borrowed = used`. `over` is the GPU time that ran beyond the
//! capacity the members last reported (a stale digest); it is zero in a steady fleet, and
//! then `used + idle` is exactly capacity × time.

use std::str::FromStr;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

/// A dimension a report can be grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum UsageDimension {
    /// The calendar day, in the report's time zone.
    Day,
    /// The queue the work ran in.
    Queue,
    /// The queue's tenant when the work ran.
    Tenant,
    /// The GPU model.
    Flavor,
}

impl UsageDimension {
    /// Every dimension, in the order rows are keyed.
    pub const ALL: [UsageDimension; 4] = [Self::Day, Self::Queue, Self::Tenant, Self::Flavor];

    /// The name in `groupBy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Day => "day",
            Self::Queue => "queue",
            Self::Tenant => "tenant",
            Self::Flavor => "flavor",
        }
    }
}

impl FromStr for UsageDimension {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|d| d.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| format!("unknown dimension '{s}'; one of day, queue, tenant, flavor"))
    }
}

/// Parses `groupBy=day,queue`; empty means every dimension.
pub fn parse_group_by(s: &str) -> Result<Vec<UsageDimension>, String> {
    let mut out: Vec<UsageDimension> = s
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    if out.is_empty() {
        out = UsageDimension::ALL.to_vec();
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// GPU time of one group of queue usage.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct QueueUsageRow {
    /// Set when grouped by day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day: Option<NaiveDate>,
    /// Set when grouped by queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Set when grouped by tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Set when grouped by flavor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor: Option<String>,
    /// GPU-seconds within the queue's guaranteed quota of the flavor at the time.
    pub guaranteed_gpu_seconds: u64,
    /// GPU-seconds beyond it (borrowed from the cohort or idle capacity).
    pub borrowed_gpu_seconds: u64,
    /// `guaranteed + borrowed`.
    pub used_gpu_seconds: u64,
}

/// GPU time of one flavor (and day, when grouped by day): what the fleet had and what of
/// it ran work.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct FlavorUsageRow {
    /// Set when grouped by day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day: Option<NaiveDate>,
    /// The GPU model.
    pub flavor: String,
    /// Reported GPUs × time.
    pub capacity_gpu_seconds: u64,
    /// GPU-seconds that ran workloads.
    pub used_gpu_seconds: u64,
    /// Capacity that ran nothing.
    pub idle_gpu_seconds: u64,
    /// Work beyond the reported capacity (a stale digest); `used + idle = capacity + over`.
    pub over_gpu_seconds: u64,
}

/// `GET /v1/usage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct UsageReport {
    /// Start of the period.
    pub from: DateTime<Utc>,
    /// End of the period as asked.
    pub to: DateTime<Utc>,
    /// End of what is accounted: `to`, or the state's clock if that is earlier (the future
    /// has no usage yet).
    pub accounted_to: DateTime<Utc>,
    /// The IANA time zone days are cut in.
    pub tz: String,
    /// The dimensions of `queues`.
    pub group_by: Vec<UsageDimension>,
    /// Queue usage, one row per group, in key order.
    pub queues: Vec<QueueUsageRow>,
    /// Per flavor (and day, when grouped by day): capacity, used, idle.
    pub flavors: Vec<FlavorUsageRow>,
    /// The oldest instant the ledger still holds; usage before it was dropped by retention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retained_since: Option<DateTime<Utc>>,
}

/// GPU-seconds as GPU-hours, for display.
pub fn gpu_hours(gpu_seconds: u64) -> f64 {
    gpu_seconds as f64 / 3600.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_by_parses_sorts_and_defaults_to_everything() {
        assert_eq!(
            parse_group_by("flavor, queue,flavor"),
            Ok(vec![UsageDimension::Queue, UsageDimension::Flavor])
        );
        assert_eq!(parse_group_by(""), Ok(UsageDimension::ALL.to_vec()));
        let e = parse_group_by("day,user").expect_err("unknown");
        assert!(e.contains("'user'"), "{e}");
    }
}
