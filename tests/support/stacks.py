"""Cloud stacks rendered offline as the tests read them: a layout from the catalog, its spec, and
the resources the Pulumi program declares (no CLI, no cloud)."""

from burst import targets
from burst.catalog import offers as catalog
from burst.placement import layout

OFFERS = catalog.load()


def render(provider, accelerator, gpus, preemptible, region=None, image=None):
    lay = layout.resolve(OFFERS, provider, accelerator, gpus, region=region, preemptible=preemptible)
    target = targets.get(provider)
    spec = target.build_spec("t", lay, preemptible, hours=2, lease_id="lease0123456", project="proj", image=image)
    result = target.rendering(spec, lay)
    return lay, spec, result["resources"], result


def of_type(resources, suffix):
    return [r for r in resources if r["type"].endswith(suffix)]
