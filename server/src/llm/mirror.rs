//! The built-in offline `mirror` model: replies with a description of what it received,
//! streamed word by word.

use super::{LlmEvent, LlmStream, ModelRequest};
use futures::StreamExt;
use parlor_domain::mirror::{describe_request, tool_request, words};
use std::time::Duration;

#[derive(Clone)]
pub struct MirrorModel {
    /// The pause before each word, so the reply visibly streams.
    pub delay: Duration,
}

impl MirrorModel {
    pub fn stream(&self, request: ModelRequest) -> LlmStream {
        let messages: Vec<_> = request.messages.iter().collect();
        if let Some(call) = tool_request(&messages, !request.tools.is_empty()) {
            let asked = LlmEvent::Finished {
                reason: "tool_calls".into(),
                usage: None,
                tool_calls: vec![call],
            };
            return futures::stream::once(async { Ok(asked) }).boxed();
        }
        let reply = describe_request(&messages);
        let pieces: Vec<String> = words(&reply).map(str::to_owned).collect();
        let delay = self.delay;
        let deltas = futures::stream::iter(pieces).then(move |piece| async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Ok(LlmEvent::Delta(piece))
        });
        let finished = futures::stream::once(async {
            Ok(LlmEvent::Finished {
                reason: "stop".into(),
                usage: None,
                tool_calls: Vec::new(),
            })
        });
        deltas.chain(finished).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parlor_domain::Message;

    #[tokio::test]
    async fn streams_the_description_word_by_word_then_finishes() {
        let model = MirrorModel {
            delay: Duration::ZERO,
        };
        let events: Vec<_> = model
            .stream(ModelRequest {
                model: "mirror".into(),
                messages: vec![Message::system("Be brief.", 0), Message::user("Hi", 1)],
                temperature: None,
                max_tokens: None,
                tools: Vec::new(),
                tool_choice: None,
            })
            .collect()
            .await;
        let mut text = String::new();
        for event in &events[..events.len() - 1] {
            match event {
                Ok(LlmEvent::Delta(t)) => text.push_str(t),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(events.len() > 10, "many small pieces");
        assert!(text.contains("I received **2 messages**"), "{text}");
        assert!(matches!(events.last(), Some(Ok(LlmEvent::Finished { .. }))));
    }
}
