//! Listing page by page behind one stream: the cursor loop every paginated list endpoint needs.

use crate::error::{Error, ErrorKind, Result};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use std::collections::HashSet;
use std::future::Future;

/// The most pages one listing reads: at 100 items a page, a million sandboxes. A provider that
/// keeps handing out new cursors past it is looping, and the listing ends with an error.
pub const MAX_PAGES: usize = 10_000;

/// The items of every page `fetch` returns, in order, as one stream fetched lazily: `fetch`
/// gets `None` for the first page, then each page's cursor. A page without a next cursor is the
/// last, and so is a page whose next cursor was already asked for (a cursor that does not move,
/// or a cycle such as a, b, a, which would loop forever). Past [`MAX_PAGES`] the stream ends
/// with a `Provider` error. The first error ends the stream.
///
/// ```
/// # async fn demo() -> sandbox_sdk_core::Result<()> {
/// use futures::TryStreamExt;
/// use sandbox_sdk_core::paging::pages;
///
/// // Two pages: [1, 2] with cursor "b", then [3] with none.
/// let items: Vec<u32> = pages(|cursor: Option<String>| async move {
///     Ok(match cursor.as_deref() {
///         None => (vec![1, 2], Some("b".to_owned())),
///         _ => (vec![3], None),
///     })
/// })
/// .try_collect()
/// .await?;
/// assert_eq!(items, [1, 2, 3]);
/// # Ok(()) }
/// ```
pub fn pages<T, F, Fut>(fetch: F) -> BoxStream<'static, Result<T>>
where
    T: Send + 'static,
    F: Fn(Option<String>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(Vec<T>, Option<String>)>> + Send + 'static,
{
    paged(fetch, MAX_PAGES)
}

/// Where a listing stands: the cursor to ask for next, every cursor asked for so far, and how
/// many pages were read.
struct Position {
    cursor: Option<String>,
    asked: HashSet<String>,
    read: usize,
}

/// [`pages`] with its page cap as an argument.
fn paged<T, F, Fut>(fetch: F, max_pages: usize) -> BoxStream<'static, Result<T>>
where
    T: Send + 'static,
    F: Fn(Option<String>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(Vec<T>, Option<String>)>> + Send + 'static,
{
    let fetch = std::sync::Arc::new(fetch);
    let start = Position {
        cursor: None,
        asked: HashSet::new(),
        read: 0,
    };
    futures::stream::try_unfold(Some(start), move |position| {
        let fetch = fetch.clone();
        async move {
            let Some(mut position) = position else {
                return Ok::<_, Error>(None);
            };
            if position.read == max_pages {
                return Err(Error::new(
                    ErrorKind::Provider,
                    format!("the listing went on past {max_pages} pages; stopped there"),
                ));
            }
            let (items, next) = fetch(position.cursor.take()).await?;
            position.read += 1;
            let position = match next {
                Some(next) if position.asked.insert(next.clone()) => {
                    position.cursor = Some(next);
                    Some(position)
                }
                Some(_) => {
                    tracing::warn!(
                        pages = position.read,
                        "listing: the provider handed out a cursor already asked for; ending the listing there"
                    );
                    None
                }
                None => None,
            };
            Ok(Some((futures::stream::iter(items.into_iter().map(Ok)), position)))
        }
    })
    .try_flatten()
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::Mutex;

    #[tokio::test]
    async fn a_cursor_that_does_not_move_ends_the_listing() {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = asked.clone();
        let items: Vec<u8> = pages(move |cursor: Option<String>| {
            seen.lock().unwrap().push(cursor.clone());
            async move { Ok((vec![1], Some("same".to_owned()))) }
        })
        .try_collect()
        .await
        .unwrap();
        assert_eq!(items, [1, 1]);
        assert_eq!(*asked.lock().unwrap(), [None, Some("same".to_owned())]);
    }

    #[tokio::test]
    async fn a_cursor_cycle_ends_the_listing_at_its_first_repeat() {
        let asked = Arc::new(Mutex::new(0usize));
        let seen = asked.clone();
        let items: Vec<u8> = pages(move |cursor: Option<String>| {
            let calls = {
                let mut n = seen.lock().unwrap();
                *n += 1;
                *n
            };
            async move {
                if calls > 10 {
                    return Err(Error::new(ErrorKind::Provider, "the listing looped"));
                }
                let next = if cursor.as_deref() == Some("a") {
                    "b"
                } else {
                    "a"
                };
                Ok((vec![1], Some(next.to_owned())))
            }
        })
        .try_collect()
        .await
        .unwrap();
        // None -> a -> b, then b answers "a" again: the listing ends without asking for it.
        assert_eq!(items, [1, 1, 1]);
        assert_eq!(*asked.lock().unwrap(), 3);
    }

    #[tokio::test]
    async fn a_listing_longer_than_the_page_cap_is_an_error() {
        let items: Vec<Result<u32>> = paged(
            |cursor: Option<String>| async move {
                let n: u32 = cursor.as_deref().map_or(0, |c| c.parse().unwrap());
                Ok((vec![n], Some((n + 1).to_string())))
            },
            4,
        )
        .collect()
        .await;
        assert_eq!(items.len(), 5);
        assert!(items[..4].iter().all(Result::is_ok));
        let error = items[4].as_ref().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Provider);
        assert!(error.to_string().contains("4 pages"), "{error}");
    }

    #[tokio::test]
    async fn an_error_ends_the_stream_after_the_items_before_it() {
        let mut stream = pages(|cursor: Option<String>| async move {
            match cursor {
                None => Ok((vec![1u8], Some("2".to_owned()))),
                Some(_) => Err(Error::new(ErrorKind::Transport, "page 2 failed")),
            }
        });
        assert_eq!(stream.next().await.unwrap().unwrap(), 1);
        assert_eq!(
            stream.next().await.unwrap().unwrap_err().kind(),
            ErrorKind::Transport
        );
        assert!(stream.next().await.is_none());
    }

    #[tokio::test]
    async fn nothing_is_fetched_until_polled() {
        let asked = Arc::new(Mutex::new(0));
        let seen = asked.clone();
        let stream = pages(move |_: Option<String>| {
            *seen.lock().unwrap() += 1;
            async move { Ok((Vec::<u8>::new(), None)) }
        });
        assert_eq!(*asked.lock().unwrap(), 0);
        drop(stream);
    }
}
