"""OpenRouter's dialect, each part in a module of its own (docs/design.md §7):

`errors` classifies an answer (HTTP status, headers, body) into the failure taxonomy of
`guardeval.backends.errors`; `providers` maps routing slugs to the display names OpenRouter reports;
`request_schema` is the documented request body as a JSON Schema (the simulator validates
against it); `http` is a small bounded JSON GET; `preflight` checks that a run can be served
as configured before anything is spent; `generation` reads the generation-stats endpoint;
`routing` reads what the router did (response cache, router metadata, the provider that
served) and `availability` judges `error.availability` on its `retryable` flag.

The transport (`guardeval.backends.chat_http`) reads the answer; these modules only judge it.
"""
