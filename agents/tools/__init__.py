"""The runtime's tools: the registry and the built-in catalog, OpenAPI / function-list
import, endpoint templates and the allow-list, credentials, argument adapters, the SSRF
guard and the executor that calls a tool."""
