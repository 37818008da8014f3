"""Infrastructure every app may use, and which knows none of them: reading the environment
(env), the cache, rate limits (limits, clients), outages, mail, prepared statements, the
security headers, e-mail identity, log format, date formats, the accessible form base,
error pages, and the domain events' delivery (events)."""
