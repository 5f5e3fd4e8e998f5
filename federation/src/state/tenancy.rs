//! Workload names scoped per tenant, and Idempotency-Keys scoped per authenticated subject
//! (`docs/decisions/0015-tenant-scoped-names.md`).
//!
//! A workload is stored under its name when its queue's tenant is [`DEFAULT_TENANT`] (every
//! single-tenant setup, and all data written before names were scoped), and under
//! `TENANT/NAME` otherwise. Names and tenants are DNS-1123 labels, so a qualified name never
//! equals a plain one, and two tenants' workloads of one name are two keys. The stored name is
//! the workload's `metadata.name` inside the federation (the state, the log, the scheduler,
//! the agents), so nothing there changes; the API resolves a plain name in what the caller may
//! read and answers with the plain name ([`plain_name`]).
//!
//! An Idempotency-Key a client sends is recorded as `SUBJECT\nKEY` when the caller is
//! authenticated: a header value cannot hold a line feed, so the record of one subject's key
//! never is another subject's, nor an anonymous key.

use tideway_api::Workload;

use super::FederationState;

/// The tenant whose workloads keep their plain names as their keys.
pub const DEFAULT_TENANT: &str = "default";

/// Between a subject and its key in a scoped idempotency record: never in a header value.
const KEY_SCOPE_SEPARATOR: char = '\n';

/// The name a workload of `tenant` called `name` is stored under.
pub fn stored_name(tenant: &str, name: &str) -> String {
    if tenant == DEFAULT_TENANT {
        name.to_owned()
    } else {
        format!("{tenant}/{name}")
    }
}

/// The name a client gave, from a stored name (a plain name is its own).
pub fn plain_name(stored: &str) -> &str {
    stored.split_once('/').map_or(stored, |(_, name)| name)
}

/// The tenant a stored name carries; `None` for a plain one (the default tenant's, or one
/// stored before names were scoped).
pub fn tenant_part(stored: &str) -> Option<&str> {
    stored.split_once('/').map(|(tenant, _)| tenant)
}

/// Gives a workload that leaves the federation through the API its plain name.
pub fn present(w: &mut Workload) {
    if let Some((_, name)) = w.metadata.name.split_once('/') {
        w.metadata.name = name.to_owned();
    }
}

/// The record key of a client's Idempotency-Key: scoped to the authenticated subject, as is
/// for an anonymous caller.
pub fn scoped_key(subject: Option<&str>, key: &str) -> String {
    match subject {
        Some(s) => format!("{s}{KEY_SCOPE_SEPARATOR}{key}"),
        None => key.to_owned(),
    }
}

/// The client's part of a record key (what [`scoped_key`] was given).
pub fn client_key(record_key: &str) -> &str {
    record_key
        .rsplit_once(KEY_SCOPE_SEPARATOR)
        .map_or(record_key, |(_, key)| key)
}

/// What a name (or UID) resolves to for one caller.
#[derive(Debug, PartialEq)]
pub enum Resolved<'a> {
    /// The one workload of that name (or UID) the caller may read.
    One(&'a Workload),
    /// None the caller may read: answered exactly as a name that does not exist.
    NotFound,
    /// Several tenants the caller may read hold that name; these (sorted).
    Ambiguous(Vec<String>),
}

impl FederationState {
    /// The tenant of queue `queue`, if the queue exists.
    pub fn tenant_of_queue(&self, queue: &str) -> Option<&str> {
        self.queues.get(queue).map(|q| q.spec.tenant.as_str())
    }

    /// The tenant a stored workload belongs to: the one its name carries, else its queue's
    /// (a workload stored under its plain name before names were scoped), else the default.
    pub fn tenant_of(&self, w: &Workload) -> String {
        tenant_part(&w.metadata.name)
            .or_else(|| self.tenant_of_queue(&w.spec.queue))
            .unwrap_or(DEFAULT_TENANT)
            .to_owned()
    }

    /// Whether `tenant` already holds a workload called `name` (a plain name): under its
    /// stored name, or under the plain name stored before names were scoped.
    pub fn name_taken(&self, tenant: &str, name: &str) -> bool {
        if self
            .workloads
            .contains_key(stored_name(tenant, name).as_str())
        {
            return true;
        }
        tenant != DEFAULT_TENANT
            && self
                .workloads
                .get(name)
                .is_some_and(|w| self.tenant_of(w) == tenant)
    }

    /// Resolves `id`, a plain name, a stored name or a UID, among the workloads `readable`
    /// admits, in `tenant` only when one is given. A name found in another tenant than the
    /// caller's is not found, exactly as a name that does not exist.
    pub fn resolve(
        &self,
        id: &str,
        tenant: Option<&str>,
        readable: impl Fn(&Workload) -> bool,
    ) -> Resolved<'_> {
        let mut candidates: Vec<&Workload> = self.workload(id).into_iter().collect();
        if !id.contains('/') {
            let mut tenants: Vec<&str> = match tenant {
                Some(t) => vec![t],
                None => self
                    .queues
                    .values()
                    .map(|q| q.spec.tenant.as_str())
                    .collect(),
            };
            tenants.sort_unstable();
            tenants.dedup();
            for t in tenants.into_iter().filter(|t| *t != DEFAULT_TENANT) {
                if let Some(w) = self.workloads.get(stored_name(t, id).as_str()) {
                    candidates.push(w);
                }
            }
        }
        let mut found: Vec<&Workload> = Vec::new();
        for w in candidates {
            if readable(w)
                && tenant.is_none_or(|t| self.tenant_of(w) == t)
                && !found.iter().any(|f| std::ptr::eq(*f, w))
            {
                found.push(w);
            }
        }
        match found.as_slice() {
            [] => Resolved::NotFound,
            [one] => Resolved::One(one),
            many => {
                let mut tenants: Vec<String> = many.iter().map(|w| self.tenant_of(w)).collect();
                tenants.sort();
                tenants.dedup();
                Resolved::Ambiguous(tenants)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::{PodSet, Queue, QueueSpec, WorkloadClass, WorkloadSpec};

    use super::*;

    fn state_with(queues: &[(&str, &str)], workloads: &[(&str, &str)]) -> FederationState {
        let mut s = FederationState::default();
        for (q, tenant) in queues {
            s.queues
                .insert((*q).into(), Queue::new(*q, QueueSpec::new(*tenant)));
        }
        for (i, (stored, queue)) in workloads.iter().enumerate() {
            let mut w = Workload::new(
                *stored,
                WorkloadSpec::new(
                    *queue,
                    WorkloadClass::Training,
                    vec![PodSet::new("p", 1, 1, "H100")],
                ),
            );
            w.metadata.uid = Some(format!("uid-{i}"));
            s.uids.insert(format!("uid-{i}").into(), (*stored).into());
            s.workloads.insert(*stored, w);
        }
        s
    }

    #[test]
    fn stored_names_of_other_tenants_never_equal_plain_ones() {
        assert_eq!(stored_name(DEFAULT_TENANT, "job"), "job");
        assert_eq!(stored_name("bob", "job"), "bob/job");
        assert_eq!(plain_name("bob/job"), "job");
        assert_eq!(plain_name("job"), "job");
        assert_eq!(tenant_part("bob/job"), Some("bob"));
        assert_eq!(tenant_part("job"), None);
        let mut w = Workload::new(
            "bob/job",
            WorkloadSpec::new("q", WorkloadClass::Training, vec![]),
        );
        present(&mut w);
        assert_eq!(w.metadata.name, "job");
    }

    #[test]
    fn keys_of_two_subjects_are_two_records_and_the_client_key_comes_back() {
        let alice = scoped_key(Some("alice"), "k-1");
        let bob = scoped_key(Some("bob"), "k-1");
        assert_ne!(alice, bob);
        assert_ne!(alice, scoped_key(None, "k-1"));
        assert_eq!(scoped_key(None, "k-1"), "k-1", "anonymous keys as before");
        assert_eq!(client_key(&alice), "k-1");
        assert_eq!(client_key("k-1"), "k-1");
        // A subject that itself holds the separator still gives the client's key back whole.
        assert_eq!(client_key(&scoped_key(Some("a\nb"), "k")), "k");
    }

    #[test]
    fn a_name_resolves_among_what_the_caller_reads_and_nowhere_else() {
        let s = state_with(
            &[("qa", "alice"), ("qb", "bob")],
            &[
                ("alice/job", "qa"),
                ("bob/job", "qb"),
                ("legacy", "qb"),
                ("plain", "default"),
            ],
        );
        let only = |q: &'static str| move |w: &Workload| w.spec.queue == q;
        let everyone = |_: &Workload| true;
        let name_of = |r: Resolved<'_>| match r {
            Resolved::One(w) => w.metadata.name.clone(),
            other => format!("{other:?}"),
        };
        assert_eq!(name_of(s.resolve("job", None, only("qa"))), "alice/job");
        assert_eq!(name_of(s.resolve("job", None, only("qb"))), "bob/job");
        assert_eq!(s.resolve("legacy", None, only("qa")), Resolved::NotFound);
        assert_eq!(name_of(s.resolve("legacy", None, only("qb"))), "legacy");
        assert_eq!(name_of(s.resolve("plain", None, everyone)), "plain");
        assert_eq!(name_of(s.resolve("uid-1", None, only("qb"))), "bob/job");
        assert_eq!(s.resolve("uid-1", None, only("qa")), Resolved::NotFound);
        assert_eq!(
            s.resolve("job", None, everyone),
            Resolved::Ambiguous(vec!["alice".into(), "bob".into()])
        );
        assert_eq!(name_of(s.resolve("job", Some("bob"), everyone)), "bob/job");
        assert_eq!(name_of(s.resolve("bob/job", None, everyone)), "bob/job");
        assert_eq!(
            s.resolve("job", Some("carol"), everyone),
            Resolved::NotFound
        );
        assert_eq!(
            name_of(s.resolve("legacy", Some("bob"), everyone)),
            "legacy"
        );
        assert_eq!(
            s.resolve("legacy", Some("alice"), everyone),
            Resolved::NotFound
        );
    }

    #[test]
    fn a_name_is_taken_in_its_tenant_only_and_by_old_plain_names_of_that_tenant() {
        let s = state_with(
            &[("qa", "alice"), ("qb", "bob")],
            &[("bob/job", "qb"), ("legacy", "qb"), ("plain", "default")],
        );
        assert!(s.name_taken("bob", "job"));
        assert!(!s.name_taken("alice", "job"));
        assert!(!s.name_taken(DEFAULT_TENANT, "job"));
        assert!(
            s.name_taken("bob", "legacy"),
            "stored before names were scoped"
        );
        assert!(!s.name_taken("alice", "legacy"));
        assert!(s.name_taken(DEFAULT_TENANT, "plain"));
        assert!(!s.name_taken("alice", "plain"));
    }
}
