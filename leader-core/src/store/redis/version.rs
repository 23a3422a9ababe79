//! The oldest server the scripts run on, and the check that refuses an older one when a
//! connection is made.

use redis::Value;
use redis::aio::ConnectionLike;

/// Redis 7.0: the scripts use `PEXPIREAT … LT`/`GT` (7.0) and `SET … PXAT` (6.2). Valkey
/// reports a `redis_version` of 7.2 or later.
pub(crate) const MINIMUM: (u32, u32) = (7, 0);

/// What the store needs, for the error message.
pub(crate) const REQUIRED: &str = "the Redis store needs Redis 7.0 or later, or Valkey";

/// The oldest `redis_version` among the servers that answered `INFO server` (one, or every
/// node of a Cluster), if it is older than [`MINIMUM`].
pub(crate) async fn too_old(
    connection: &mut impl ConnectionLike,
) -> Result<Option<String>, redis::RedisError> {
    let info: Value = redis::cmd("INFO").arg("server").query_async(connection).await?;
    let mut texts = Vec::new();
    collect_texts(&info, &mut texts);
    let oldest = texts.iter().filter_map(|text| version_in(text)).min_by_key(|(parsed, _)| *parsed);
    Ok(oldest.filter(|(parsed, _)| *parsed < MINIMUM).map(|(_, shown)| shown))
}

/// Every text in a reply: one server's INFO, or a Cluster's per-node answers.
fn collect_texts(value: &Value, texts: &mut Vec<String>) {
    match value {
        Value::BulkString(bytes) => texts.push(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => texts.push(text.clone()),
        Value::VerbatimString { text, .. } => texts.push(text.clone()),
        Value::Array(values) | Value::Set(values) => {
            values.iter().for_each(|value| collect_texts(value, texts))
        }
        Value::Map(pairs) => pairs.iter().for_each(|(_, value)| collect_texts(value, texts)),
        _ => {}
    }
}

/// `redis_version:7.0.15` in an INFO text: (major, minor) and the version as written.
fn version_in(info: &str) -> Option<((u32, u32), String)> {
    let line = info.lines().find_map(|line| line.trim().strip_prefix("redis_version:"))?;
    let mut parts = line.split('.').map(|part| part.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    Some(((major, minor), line.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_version_from_info() {
        let info = "# Server\r\nredis_version:6.2.14\r\nredis_mode:standalone\r\n";
        assert_eq!(version_in(info), Some(((6, 2), "6.2.14".to_owned())));
        let valkey =
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.1\r\n";
        assert_eq!(version_in(valkey).unwrap().0, (7, 2));
        assert_eq!(version_in("# Server\r\n"), None);
        assert!((6, 2) < MINIMUM && (7, 0) >= MINIMUM && (10, 0) >= MINIMUM);
    }
}
