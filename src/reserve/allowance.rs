//! The house rule max-gpus-per-user: what it leaves this launch, given the reservations the
//! user holds now, and the request cut down to it (or why it must wait for them to end).

use std::borrow::Cow;

use crate::options::count::Count;
use crate::reserve::error::AcquireError;
use crate::reserve::lease::Lease;
use crate::select::policy::Request;

/// The request under max-gpus-per-user: at most what the rule leaves this user now, or (the
/// second value) why it must wait for the user's own reservations to end first.
pub(super) fn capped_request<'a>(
    request: &'a Request,
    rule: Option<&(u32, String)>,
    live: &[Lease],
) -> Result<(Cow<'a, Request>, Option<String>), AcquireError> {
    let allowance = user_allowance(request, rule, live).map_err(AcquireError::Impossible)?;
    Ok(match allowance {
        Some((allowed, why)) if request.count.min > allowed => (Cow::Borrowed(request), Some(why)),
        Some((allowed, _)) => {
            let most = request.count.max.map_or(allowed, |max| max.min(allowed));
            let count = Count { max: Some(most), ..request.count };
            (Cow::Owned(Request { count, ..request.clone() }), None)
        }
        None => (Cow::Borrowed(request), None),
    })
}

/// What the rule (`max`, in its words) leaves this launch: `Ok(None)` no rule, `Ok(Some(n))`
/// at most n more GPUs now, `Err(why)` the request alone is over the rule.
fn user_allowance(
    request: &Request,
    rule: Option<&(u32, String)>,
    live: &[Lease],
) -> Result<Option<(u32, String)>, String> {
    let Some((max, rule)) = rule else {
        return Ok(None);
    };
    let count = request.count;
    if count.min > *max {
        return Err(format!("--gpus {count}: the house rule {rule} allows at most {max} per user"));
    }
    let uid = crate::reserve::lockdir::current_uid();
    let held = live.iter().filter(|lease| lease.uid == uid).count() as u32;
    let why = format!(
        "you hold {held} reserved GPU{}, and the house rule is {rule}",
        if held == 1 { "" } else { "s" }
    );
    Ok(Some((max.saturating_sub(held), why)))
}
