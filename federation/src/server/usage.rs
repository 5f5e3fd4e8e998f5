//! `GET /v1/usage?from=&to=&groupBy=&tz=`: the chargeback report, from the replicated usage
//! ledger after a linearizable read barrier.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use serde::Deserialize;
use tideway_api::usage::{UsageReport, parse_group_by};

use super::AppState;
use super::error::ApiError;
use super::workloads::query_error;

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UsageParams {
    /// RFC 3339, or a date (`2026-11-30`: midnight in `tz`).
    pub from: Option<String>,
    /// As `from`; the present if left out.
    pub to: Option<String>,
    /// Comma-separated dimensions of the queue rows: day, queue, tenant, flavor (all if
    /// left out).
    pub group_by: Option<String>,
    /// IANA time zone the days are cut in; UTC if left out.
    pub tz: Option<String>,
    #[serde(default)]
    pub stale: bool,
}

/// An instant from RFC 3339 or a date at midnight in `tz`.
pub fn parse_instant(s: &str, tz: Tz) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    let day = NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .map_err(|_| format!("'{s}' is neither an RFC 3339 time nor a YYYY-MM-DD date"))?;
    (0..24)
        .find_map(|h| {
            day.and_hms_opt(h, 0, 0)
                .and_then(|l| tz.from_local_datetime(&l).earliest())
        })
        .map(|t| t.with_timezone(&Utc))
        .ok_or_else(|| format!("'{s}' has no start of day in {}", tz.name()))
}

pub async fn report(
    State(st): State<AppState>,
    params: Result<Query<UsageParams>, QueryRejection>,
) -> Result<Json<UsageReport>, ApiError> {
    let Query(p) = params.map_err(query_error)?;
    let tz: Tz = match p.tz.as_deref() {
        None => Tz::UTC,
        Some(s) => s
            .parse()
            .map_err(|_| ApiError::field("query:tz", format!("unknown time zone '{s}'")))?,
    };
    let from = p
        .from
        .as_deref()
        .ok_or_else(|| ApiError::field("query:from", "required: the start of the period"))
        .and_then(|s| parse_instant(s, tz).map_err(|e| ApiError::field("query:from", e)))?;
    let to = match p.to.as_deref() {
        None => st.clock.now(),
        Some(s) => parse_instant(s, tz).map_err(|e| ApiError::field("query:to", e))?,
    };
    if to <= from {
        return Err(ApiError::field("query:to", "must be after from"));
    }
    let by = parse_group_by(p.group_by.as_deref().unwrap_or(""))
        .map_err(|e| ApiError::field("query:groupBy", e))?;
    st.read_barrier(p.stale).await?;
    let report = st.read(|d| d.state.usage_report(from, to, tz, &by))?;
    Ok(Json(report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_date_is_midnight_in_the_zone_and_garbage_is_named() {
        let berlin: Tz = "Europe/Berlin".parse().expect("tz");
        assert_eq!(
            parse_instant("2026-11-30", berlin).map(|t| t.to_rfc3339()),
            Ok("2026-11-29T23:00:00+00:00".to_string())
        );
        assert_eq!(
            parse_instant("2026-11-30T10:00:00Z", berlin).map(|t| t.to_rfc3339()),
            Ok("2026-11-30T10:00:00+00:00".to_string())
        );
        let e = parse_instant("yesterday", Tz::UTC).expect_err("garbage");
        assert!(e.contains("'yesterday'"), "{e}");
    }
}
