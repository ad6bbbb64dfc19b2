//! Listing page by page behind one stream: the cursor loop every paginated list endpoint needs.

use crate::error::Result;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use std::future::Future;

/// The items of every page `fetch` returns, in order, as one stream fetched lazily: `fetch`
/// gets `None` for the first page, then each page's cursor; a page without a next cursor, or
/// whose cursor does not move (which would loop forever), is the last. The first error ends
/// the stream.
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
    let fetch = std::sync::Arc::new(fetch);
    futures::stream::try_unfold(Some(None::<String>), move |cursor| {
        let fetch = fetch.clone();
        async move {
            let Some(cursor) = cursor else {
                return Ok::<_, crate::error::Error>(None);
            };
            let (items, next) = fetch(cursor.clone()).await?;
            let next = next.filter(|n| Some(n) != cursor.as_ref()).map(Some);
            Ok(Some((
                futures::stream::iter(items.into_iter().map(Ok)),
                next,
            )))
        }
    })
    .try_flatten()
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, ErrorKind};
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
