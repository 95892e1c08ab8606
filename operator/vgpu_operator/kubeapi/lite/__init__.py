"""The node agent's Kubernetes client, on the standard library (asyncio streams, ssl, json).

The agent runs on every GPU node for as long as the node lives; kubernetes-asyncio with aiohttp
under it is about 25 MiB of each agent's resident memory (bench/agent_cost.py). What the agent
asks of the API is small: GET, merge PATCH and POST of JSON, and list-then-watch of its own Node.
This client does that with the controller's semantics, sharing the standard-library parts of
`kubeapi` (the error tree, `reflector`, `resources`, `auth`, `source`):

    settings = load(resolve(kubeconfig, context))   # kubeapi.source.resolve; CredentialsError
    async with LiteClient(settings, user_agent="...") as api:
        node = await api.request("GET", node_path(name))
        async for update in api.list_watch(node_path(), options): ...

`http` speaks HTTP/1.1, `config` reads the credentials, `client` is the client.
"""

from vgpu_operator.kubeapi.lite.client import LiteClient
from vgpu_operator.kubeapi.lite.config import Settings, Token, load

__all__ = ["LiteClient", "Settings", "Token", "load"]
