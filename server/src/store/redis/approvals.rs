//! Approvals across processes on one Redis: a call waiting for the user is marked in Redis
//! (`<prefix><history>:<session>:approval:<call>`, expiring with its wait), so an answer
//! that reaches another process (behind a load balancer) is written there and read by the
//! process that waits. A call is answered once: only a marker that still waits takes it.

use super::SharedRedis;
use crate::store::StoreError;
use crate::tools::approval::Answer;
use parlor_domain::ConversationId;
use std::time::Duration;

/// How often a waiting process looks for an answer given elsewhere.
const POLL: Duration = Duration::from_millis(200);
const WAITING: &str = "waiting";

/// Sets the answer only while the marker waits: 1 when it did, 0 when it was answered
/// already, -1 when there is no marker.
const ANSWER_IF_WAITING: &str = r#"
local now = redis.call('GET', KEYS[1])
if now == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
  return 1
end
if now then return 0 end
return -1
"#;

/// What answering through Redis came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Given {
    /// The waiting call (on some process) has it.
    Taken,
    /// It was answered already.
    Answered,
    /// No process marked it waiting (unknown, ended, or marked while Redis was away).
    Unmarked,
}

fn key(redis: &SharedRedis, history: &str, session: &ConversationId, call: &str) -> String {
    format!("{}{history}:{session}:approval:{call}", redis.prefix)
}

fn word(answer: Answer) -> &'static str {
    match answer {
        Answer::Deny => "deny",
        Answer::Once => "once",
        Answer::Conversation => "conversation",
    }
}

fn answer_of(word: &str) -> Option<Answer> {
    match word {
        "deny" => Some(Answer::Deny),
        "once" => Some(Answer::Once),
        "conversation" => Some(Answer::Conversation),
        _ => None,
    }
}

/// A call's wait as every process sees it; the marker is removed when dropped.
pub struct SharedWait {
    redis: SharedRedis,
    key: String,
}

impl SharedWait {
    /// Marks call `call` of `session` as waiting for up to `wait` (and a little more).
    pub async fn open(
        redis: &SharedRedis,
        history: &str,
        session: &ConversationId,
        call: &str,
        wait: Duration,
    ) -> Result<SharedWait, StoreError> {
        let key = key(redis, history, session, call);
        let ttl = (wait + Duration::from_secs(5)).as_millis() as u64;
        let mut connection = redis.connection.clone();
        redis::cmd("SET")
            .arg(&key)
            .arg(WAITING)
            .arg("PX")
            .arg(ttl)
            .query_async::<()>(&mut connection)
            .await
            .map_err(StoreError::from)?;
        Ok(SharedWait {
            redis: redis.clone(),
            key,
        })
    }

    /// The answer another process wrote (never returns while none is: a Redis that is away
    /// leaves the local answer and the timeout to end the wait).
    pub async fn answered(&self) -> Answer {
        let mut connection = self.redis.connection.clone();
        loop {
            tokio::time::sleep(POLL).await;
            let value: redis::RedisResult<Option<String>> = redis::cmd("GET")
                .arg(&self.key)
                .query_async(&mut connection)
                .await;
            if let Some(answer) = value.ok().flatten().as_deref().and_then(answer_of) {
                return answer;
            }
        }
    }
}

impl Drop for SharedWait {
    fn drop(&mut self) {
        let (mut connection, key) = (self.redis.connection.clone(), std::mem::take(&mut self.key));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _: redis::RedisResult<()> = redis::cmd("DEL")
                    .arg(key)
                    .query_async(&mut connection)
                    .await;
            });
        }
    }
}

/// Answers call `call` waiting on any process.
pub async fn answer(
    redis: &SharedRedis,
    history: &str,
    session: &ConversationId,
    call: &str,
    answer: Answer,
) -> Result<Given, StoreError> {
    let mut connection = redis.connection.clone();
    let taken: i64 = redis::cmd("EVAL")
        .arg(ANSWER_IF_WAITING)
        .arg(1)
        .arg(key(redis, history, session, call))
        .arg(WAITING)
        .arg(word(answer))
        .query_async(&mut connection)
        .await
        .map_err(StoreError::from)?;
    Ok(match taken {
        1 => Given::Taken,
        0 => Given::Answered,
        _ => Given::Unmarked,
    })
}
