//! Evidence grants: `GET /internal/v1/runs/{run_id}/grants/{principal_id}` and
//! `POST /internal/v1/evidence-grants/query`.

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::Json;

use super::read_fault;
use crate::contract::{EvidenceGrant, EvidenceGrants, EvidenceQuery, RunGrant};
use crate::error::ApiError;
use crate::state::AppState;

/// Evidence grants of one principal on many runs.
pub(super) async fn evidence_query(
    State(st): State<AppState>,
    body: Result<Json<EvidenceQuery>, JsonRejection>,
) -> Result<Json<EvidenceGrants>, ApiError> {
    let Json(q) = body?;
    read_fault(&st).await?;
    if q.run_ids.len() > 1000 {
        return Err(ApiError::invalid("at most 1000 run_ids per query"));
    }
    let inner = st.lock().await;
    let grants = q
        .run_ids
        .into_iter()
        .map(|run_id| {
            let granted = inner
                .evidence_granted(&run_id, &q.principal_id)
                .unwrap_or(false);
            RunGrant {
                run_id,
                principal_id: q.principal_id.clone(),
                evidence: if granted {
                    EvidenceGrant::Granted
                } else {
                    EvidenceGrant::Revoked
                },
            }
        })
        .collect();
    Ok(Json(EvidenceGrants { grants }))
}

pub(super) async fn run_grant(
    State(st): State<AppState>,
    Path((run_id, principal_id)): Path<(String, String)>,
) -> Result<Json<RunGrant>, ApiError> {
    read_fault(&st).await?;
    let mut inner = st.lock().await;
    inner.run_mut(&run_id)?;
    let granted = inner
        .evidence_granted(&run_id, &principal_id)
        .unwrap_or(false);
    Ok(Json(RunGrant {
        run_id,
        principal_id,
        evidence: if granted {
            EvidenceGrant::Granted
        } else {
            EvidenceGrant::Revoked
        },
    }))
}
