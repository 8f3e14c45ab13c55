//! How environment values are read: each returns the value or why it is refused.

use super::*;

pub fn text(value: &str) -> Result<String, String> {
    Ok(value.to_owned())
}

pub fn key(value: &str) -> Result<ApiKey, String> {
    Ok(ApiKey(value.to_owned()))
}

pub fn token(value: &str) -> Result<ApiKey, String> {
    match value.trim().is_empty() {
        true => Err("must not be empty (unset it to turn /mcp off)".into()),
        false => key(value),
    }
}

pub fn cookie_key(value: &str) -> Result<CookieKey, String> {
    CookieKey::parse(value).ok_or_else(|| CookieKey::FORMAT.into())
}

pub fn path(value: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(value))
}

pub fn http_url(value: &str) -> Result<String, String> {
    match value.starts_with("http://") || value.starts_with("https://") {
        true => Ok(value.trim_end_matches('/').to_owned()),
        false => Err("must start with http:// or https://".into()),
    }
}

pub fn at_least<const MIN: u64>(value: &str) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(n) if n >= MIN => Ok(n),
        _ => Err(format!("must be a whole number of at least {MIN}")),
    }
}

pub fn count<const MIN: usize>(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n >= MIN => Ok(n),
        _ => Err(format!("must be a whole number of at least {MIN}")),
    }
}

pub fn context_bytes(value: &str) -> Result<usize, String> {
    count::<MAX_BODY_BYTES>(value).map_err(|_| {
        format!("must be at least {MAX_BODY_BYTES} (the limit of requests without images)")
    })
}

pub fn per_minute(value: &str) -> Result<u32, String> {
    value
        .parse::<u32>()
        .map_err(|_| "must be a whole number of requests per minute (0: no limit)".into())
}

pub fn yes_no(value: &str) -> Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("allowed values: true, false".into()),
    }
}

pub fn policy(value: &str) -> Result<HistoryPolicy, String> {
    value.parse::<HistoryPolicy>().map_err(|_| {
        format!(
            "allowed values: {} (case-sensitive)",
            HistoryPolicy::ALLOWED
        )
    })
}

pub fn length(value: &str) -> Result<HistoryLength, String> {
    value
        .parse::<HistoryLength>()
        .map_err(|_| "must be an integer such as 20 (0 or less acts as 1)".into())
}

pub fn addresses(value: &str) -> Result<Vec<IpAddr>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            item.parse::<IpAddr>().map_err(|_| {
                format!(
                    "{item:?} is not an IP address: list IP addresses separated by commas, \
                     e.g. 127.0.0.1,10.0.0.2"
                )
            })
        })
        .collect()
}

pub fn socket(value: &str) -> Result<SocketAddr, String> {
    value
        .parse::<SocketAddr>()
        .map_err(|_| "must be an address and port, e.g. 127.0.0.1:9100".into())
}

pub fn log_format(value: &str) -> Result<LogFormat, String> {
    match value {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err("allowed values: text, json".into()),
    }
}
