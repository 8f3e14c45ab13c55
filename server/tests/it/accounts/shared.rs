//! Two processes on one Redis share accounts, logins and quotas.

use super::*;
use crate::support::{redis_history, TestServer};
use fake_llm::redis_server::RedisServer;

#[tokio::test]
async fn two_processes_on_one_redis_share_logins_removals_and_the_quota() {
    let redis = RedisServer::start().unwrap();
    let config = redis_history(&redis.url(), "acct:");
    let path = config.path().to_str().unwrap().to_owned();
    let vars = [
        ("PARLOR_AUTH", "local"),
        ("PARLOR_CONFIG", path.as_str()),
        ("PARLOR_TOKENS_PER_DAY", "8"),
    ];
    let one = TestServer::start(&vars).await;
    let two = TestServer::start(&vars).await;
    add_users(&one).await;
    // Accounts made on one process log in on the other.
    let bob = cookie_of(&two, "bob").await;
    assert_eq!(get(&one, "/api/account", &Auth::Cookie(&bob)).await.0, 200);
    assert_eq!(get(&two, "/api/account", &Auth::Cookie(&bob)).await.0, 200);
    // Both processes keep the logins they read while Redis tells them of changes: the
    // rest of this test runs on what they keep.
    tracking_clients(&redis, 2).await;
    assert_eq!(get(&one, "/api/account", &Auth::Cookie(&bob)).await.0, 200);
    assert_eq!(get(&two, "/api/account", &Auth::Cookie(&bob)).await.0, 200);
    // The quota counts both processes' turns.
    let words = "one two three four five six seven eight nine";
    let first = chat(&one, &Auth::Cookie(&bob), json!({ "message": words })).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let refused = chat(&two, &Auth::Cookie(&bob), json!({ "message": "again" })).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    // A logout on one process ends the login on both.
    let out = client()
        .post(one.url("/auth/logout"))
        .header("cookie", &bob)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 204);
    ended_soon(&two, &Auth::Cookie(&bob)).await;
    // Removing a user on one ends their logins and tokens on the other.
    let ada = cookie_of(&one, "ada").await;
    let token = make_token(&two, &ada).await;
    assert_eq!(
        get(&one, "/api/account", &Auth::Bearer(&token)).await.0,
        200
    );
    assert_eq!(get(&one, "/api/account", &Auth::Cookie(&ada)).await.0, 200);
    two.services
        .accounts
        .as_ref()
        .unwrap()
        .remove("ada")
        .await
        .unwrap();
    ended_soon(&one, &Auth::Cookie(&ada)).await;
    assert_eq!(
        get(&one, "/api/account", &Auth::Bearer(&token)).await.0,
        401
    );
}

/// A change made on another process reaches this one as Redis's invalidation, which may
/// arrive a moment after the change's own answer (on a loaded machine): the login is refused
/// within a second.
async fn ended_soon(server: &TestServer, auth: &Auth<'_>) {
    for _ in 0..100 {
        if get(server, "/api/account", auth).await.0 == 401 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the login still works on the other process");
}

/// Waits until `count` connections ask Redis to tell them of changes (`CLIENT TRACKING`).
async fn tracking_clients(redis: &RedisServer, count: usize) {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    for _ in 0..500 {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut connection)
            .await
            .unwrap();
        let tracking = list
            .lines()
            .filter(|line| {
                line.split(' ')
                    .find_map(|field| field.strip_prefix("flags="))
                    .is_some_and(|flags| flags.contains('t'))
            })
            .count();
        if tracking >= count {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("fewer than {count} connections track account keys");
}

#[tokio::test]
async fn accounts_on_redis_keep_conversations_apart() {
    let redis = RedisServer::start().unwrap();
    let config = redis_history(&redis.url(), "own:");
    let path = config.path().to_str().unwrap().to_owned();
    let server = local(&[("PARLOR_CONFIG", path.as_str())]).await;
    let ada = cookie_of(&server, "ada").await;
    let bob = cookie_of(&server, "bob").await;
    let reply = chat(
        &server,
        &Auth::Cookie(&ada),
        json!({ "message": "on redis" }),
    )
    .await;
    let export = format!("/api/chat/general/sessions/{}/export", reply.session_id());
    assert_eq!(get(&server, &export, &Auth::Cookie(&ada)).await.0, 200);
    assert_eq!(get(&server, &export, &Auth::Cookie(&bob)).await.0, 404);
}
