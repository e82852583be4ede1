"""The ground floor's registries and the plain contracts they hand out (docs/layers.md): every extension
point of recall, each filled by recall's own modules and by installed plugins through one loader.

    loader.py    Registry: builtin modules by name, then the entry-point group; a broken plugin is one line
    methods.py   Method, MethodRun, Family, register_method: ways to forget less (group recall_cli.methods)
    adapter.py   Adapter and Adapted: what an adapter method (LoRA, OSF) implements
    probes.py    Probe, register_probe: what a model still knows (group recall_cli.probes)
    tasks.py     register_task_type: task types beside classification (group recall_cli.tasks)
    merges.py    register_merge: merge methods for `recall merge` (group recall_cli.merge)
    trackers.py  TrackerEntry, register_tracker: train.report_to's trackers (group recall_cli.trackers)

Standard library only at import, and nothing of recall above errors.py and names.py: recipe/, training/,
the method rooms and the reports all read these, and none of these reads them.
"""
