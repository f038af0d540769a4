//! The claims table ([`ClaimTable`]): one conditional `UpdateItem` per acquire or change, the
//! fencing token and version grown inside the same write.

use super::DynamoTables;
use super::model::{claim_key, corrupt, decode_claim, encode_body, get_n, n, s, state_name};
use super::versioned::{Cond, CondWrite, own_lost_write};
use async_trait::async_trait;
use std::collections::HashMap;
use tilegate_core::table::{
    AcquireOutcome, ClaimChange, ClaimRecord, ClaimState, ClaimTable, UpdateOutcome, Versioned,
};
use tilegate_core::{StoreResult, UnixMillis};
use tracing::debug;

#[async_trait]
impl ClaimTable for DynamoTables {
    async fn acquire(
        &self,
        resource: &str,
        owner: &str,
        now: UnixMillis,
        expires_at: UnixMillis,
    ) -> StoreResult<AcquireOutcome> {
        // One conditional write: no claim, or an expired one that is not done. The fencing
        // token and the version grow inside the same write.
        let values = HashMap::from([
            (":now".to_owned(), n(now)),
            (":done".to_owned(), s("done")),
            (":held".to_owned(), s("held")),
            (":o".to_owned(), s(owner)),
            (":exp".to_owned(), n(expires_at)),
            (":zero".to_owned(), n(0)),
            (":one".to_owned(), n(1)),
        ]);
        let (attempt, cond) = self
            .update_conditional(
                CondWrite {
                    operation: "acquire claim",
                    table: &self.claims,
                    condition: "attribute_not_exists(#r) OR (#exp < :now AND #st <> :done)",
                    names: &[
                        ("#r", "resource"),
                        ("#o", "owner"),
                        ("#exp", "expires_at"),
                        ("#st", "state"),
                        ("#ft", "fencing_token"),
                        ("#v", "version"),
                        ("#out", "output"),
                    ],
                    shown: resource,
                },
                claim_key(resource),
                "SET #o = :o, #exp = :exp, #st = :held, \
                 #ft = if_not_exists(#ft, :zero) + :one, #v = if_not_exists(#v, :zero) + :one \
                 REMOVE #out",
                values,
            )
            .await?;
        match cond {
            Cond::Applied(item) => {
                let claim = decode_claim(&item, resource)?;
                debug!(
                    store = "dynamodb",
                    resource,
                    owner,
                    fencing_token = claim.row.fencing_token,
                    outcome = "acquired",
                    "acquire claim"
                );
                Ok(AcquireOutcome::Acquired(claim))
            }
            Cond::Refused(old) => {
                let current = match old {
                    Some(item) => decode_claim(&item, resource)?,
                    None => self.get_claim(resource).await?.ok_or_else(|| {
                        corrupt("claim row", resource, "refused an acquire but is absent")
                    })?,
                };
                if own_lost_write(attempt, Some(&current), |c| {
                    c.row.owner == owner
                        && c.row.expires_at == expires_at
                        && c.row.state == ClaimState::Held
                })
                .is_some()
                {
                    // Our own earlier attempt acquired it and its answer was lost.
                    return Ok(AcquireOutcome::Acquired(current));
                }
                let c = &current.row;
                debug!(store = "dynamodb", resource, owner, holder = %c.owner, outcome = "existing", "acquire claim");
                Ok(AcquireOutcome::Existing(current))
            }
        }
    }

    async fn change(
        &self,
        resource: &str,
        owner: &str,
        fencing_token: u64,
        change: ClaimChange,
    ) -> StoreResult<UpdateOutcome<ClaimRecord>> {
        let mut values = HashMap::from([
            (":o".to_owned(), s(owner)),
            (":t".to_owned(), n(fencing_token)),
            (":one".to_owned(), n(1)),
        ]);
        let holds = "#o = :o AND #ft = :t";
        let holds_held = "#o = :o AND #ft = :t AND #st = :held";
        let (update, condition) = match &change {
            ClaimChange::Renew { expires_at } => {
                values.insert(":exp".to_owned(), n(expires_at));
                values.insert(":held".to_owned(), s("held"));
                ("SET #exp = :exp, #v = #v + :one", holds_held)
            }
            ClaimChange::Complete { output } => {
                let json = encode_body(output, "claim output", resource)?;
                values.insert(":out".to_owned(), s(json));
                values.insert(":held".to_owned(), s("held"));
                values.insert(":done".to_owned(), s(state_name(ClaimState::Done)));
                ("SET #st = :done, #out = :out, #v = #v + :one", holds_held)
            }
            // Expired at once, so any later acquirer's `expires_at < now` holds; the state is
            // kept, so releasing a done claim never reopens it.
            ClaimChange::Release => {
                values.insert(":exp".to_owned(), n(UnixMillis::MIN));
                ("SET #exp = :exp, #v = #v + :one", holds)
            }
        };
        let mut names = vec![("#o", "owner"), ("#ft", "fencing_token"), ("#v", "version")];
        match &change {
            ClaimChange::Renew { .. } => names.extend([("#exp", "expires_at"), ("#st", "state")]),
            ClaimChange::Complete { .. } => names.extend([("#st", "state"), ("#out", "output")]),
            ClaimChange::Release => names.push(("#exp", "expires_at")),
        }
        let (attempt, cond) = self
            .update_conditional(
                CondWrite {
                    operation: "change claim",
                    table: &self.claims,
                    condition,
                    names: &names,
                    shown: resource,
                },
                claim_key(resource),
                update,
                values,
            )
            .await?;
        match cond {
            Cond::Applied(item) => Ok(UpdateOutcome::Updated {
                version: get_n(&item, "version", "claim row", resource)?,
            }),
            Cond::Refused(old) => {
                let current = old.map(|item| decode_claim(&item, resource)).transpose()?;
                if let ClaimChange::Complete { output } = &change
                    && let Some(c) = own_lost_write(attempt, current.as_ref(), |c| {
                        c.row.owner == owner
                            && c.row.fencing_token == fencing_token
                            && c.row.state == ClaimState::Done
                            && c.row.output.as_ref() == Some(output)
                    })
                {
                    // Our own completion landed and its answer was lost.
                    return Ok(UpdateOutcome::Updated { version: c.version });
                }
                debug!(
                    store = "dynamodb",
                    resource,
                    owner,
                    fencing_token,
                    outcome = "superseded",
                    "change claim"
                );
                Ok(UpdateOutcome::Superseded(current))
            }
        }
    }

    async fn get_claim(&self, resource: &str) -> StoreResult<Option<Versioned<ClaimRecord>>> {
        self.get_item(&self.claims, claim_key(resource), resource)
            .await?
            .map(|item| decode_claim(&item, resource))
            .transpose()
    }
}
