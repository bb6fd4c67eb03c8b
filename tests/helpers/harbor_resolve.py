"""Resolves a dataset name with Harbor's own registry client, as `harbor run -d` does.

Run with a Harbor install's python (tests/helpers/harbor_runtime.sh VERSION):
  harbor_resolve.py NAME[@VERSION] [REGISTRY_URL | --repo SOURCE]
With no REGISTRY_URL, Harbor's default (the hub, which HARBOR_SUPABASE_URL and
HARBOR_SUPABASE_PUBLISHABLE_KEY move); with one, a JSON registry at that URL; with --repo, the
registry.json of that git repository (Harbor's `--repo`).
Prints {"name", "version", "tasks": [{"git_url", "git_commit_id", "path"}]} as JSON.
"""

import asyncio
import json
import sys


async def main():
    from harbor.registry.client.factory import RegistryClientFactory

    name = sys.argv[1]
    if len(sys.argv) > 3 and sys.argv[2] == "--repo":
        client = RegistryClientFactory.create(repo=sys.argv[3])
    else:
        registry_url = sys.argv[2] if len(sys.argv) > 2 else None
        client = RegistryClientFactory.create(registry_url=registry_url)
    metadata = await client.get_dataset_metadata(name)
    tasks = [task.model_dump(mode="json") for task in metadata.task_ids]
    print(json.dumps({"name": metadata.name, "version": metadata.version, "tasks": tasks}))


asyncio.run(main())
