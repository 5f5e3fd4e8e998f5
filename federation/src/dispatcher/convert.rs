//! Conversions between the scheduler core's types and the replicated state's own records of
//! them. The state never embeds the core's types, so a change in the core cannot silently
//! change what is in the log or a snapshot; it has to come through here.

use tideway_scheduler::{DomainRef, PodCount, PoolPlacement};

use crate::state::scheduling::{Domain, Placement, Pods, Reservation};

impl From<&PoolPlacement> for Placement {
    fn from(p: &PoolPlacement) -> Self {
        Placement {
            flavor: p.flavor.clone(),
            pool: p.pool.clone(),
            domain: p.domain.as_ref().map(|d| Domain {
                level: d.level,
                name: d.name.clone(),
            }),
            pods: p
                .pods
                .iter()
                .map(|c| Pods {
                    gpus_per_pod: c.gpus_per_pod,
                    count: c.count,
                })
                .collect(),
        }
    }
}

impl From<&Placement> for PoolPlacement {
    fn from(p: &Placement) -> Self {
        PoolPlacement {
            flavor: p.flavor.clone(),
            pool: p.pool.clone(),
            domain: p.domain.as_ref().map(|d| DomainRef {
                level: d.level,
                name: d.name.clone(),
            }),
            pods: p
                .pods
                .iter()
                .map(|c| PodCount {
                    gpus_per_pod: c.gpus_per_pod,
                    count: c.count,
                })
                .collect(),
        }
    }
}

impl From<&tideway_scheduler::Reservation> for Reservation {
    fn from(r: &tideway_scheduler::Reservation) -> Self {
        Reservation {
            uid: r.uid.as_str().into(),
            cluster: r.cluster.as_str().into(),
            expected_start: r.expected_start,
            created_at: r.created_at,
        }
    }
}

impl From<&Reservation> for tideway_scheduler::Reservation {
    fn from(r: &Reservation) -> Self {
        tideway_scheduler::Reservation {
            uid: r.uid.to_string(),
            cluster: r.cluster.to_string(),
            expected_start: r.expected_start,
            created_at: r.created_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use tideway_api::TopologyLevel;

    use super::*;

    #[test]
    fn placements_and_reservations_round_trip_through_the_state_types() {
        let p = PoolPlacement {
            flavor: "H100".into(),
            pool: "p0".into(),
            domain: Some(DomainRef {
                level: TopologyLevel::Rack,
                name: "rack-3".into(),
            }),
            pods: vec![PodCount {
                gpus_per_pod: 8,
                count: 4,
            }],
        };
        let stored = Placement::from(&p);
        assert_eq!(stored.pods[0].count, 4);
        assert_eq!(PoolPlacement::from(&stored), p);
        let at = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).single();
        let r = tideway_scheduler::Reservation {
            uid: "u1".into(),
            cluster: "c1".into(),
            expected_start: at.unwrap_or_default(),
            created_at: at.unwrap_or_default(),
        };
        assert_eq!(
            tideway_scheduler::Reservation::from(&Reservation::from(&r)),
            r
        );
    }
}
