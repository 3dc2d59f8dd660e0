"""A YAML loader for configs: duplicate keys and alias bombs are errors, not surprises.

PyYAML keeps the last of two equal keys (a second `acl:` would silently drop the first's rules)
and shares aliased nodes, so a ~600-byte "billion laughs" file only blows up when something
walks it; both are refused here, before anything walks the data.
"""
from __future__ import annotations

import yaml

MAX_CONFIG_BYTES = 1 << 20  # a config is a page of settings; far larger is a mistake or an attack
MAX_ALIASES = 100
MAX_NODES = 100_000  # nodes after expanding every alias


class YamlConfigError(ValueError):
    pass


class _ConfigLoader(yaml.SafeLoader):
    def __init__(self, stream):
        super().__init__(stream)
        self._aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise YamlConfigError(f"line {mark.line + 1}: more than {MAX_ALIASES} YAML aliases "
                                      "(refused: an alias bomb would expand without bound)")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` then an explicit key is YAML's override, not a duplicate
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: SafeConstructor reports it
            if first is not None:
                raise YamlConfigError(f"duplicate key {str(key)[:100]!r} at lines {first} and {line} "
                                      "(the second would silently replace the first)")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _expanded_size(node, memo: dict, active: set) -> int:
    """Nodes the data would have with every alias expanded (aliases share nodes, so memoized)."""
    if id(node) in memo:
        return memo[id(node)]
    if id(node) in active:
        raise YamlConfigError(f"line {node.start_mark.line + 1}: a YAML alias refers to itself")
    active.add(id(node))
    total = 1
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    else:
        children = []
    for child in children:
        total += _expanded_size(child, memo, active)
        if total > MAX_NODES:
            break
    active.discard(id(node))
    memo[id(node)] = total
    return total


def load_yaml(text: str):
    """Parse one YAML document of config; YamlConfigError (or yaml.YAMLError) if it is refused."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_CONFIG_BYTES:
        raise YamlConfigError(f"larger than {MAX_CONFIG_BYTES // 1024} KiB (refused: a config is a few "
                              "pages of settings)")
    loader = _ConfigLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        if _expanded_size(root, {}, set()) > MAX_NODES:
            raise YamlConfigError(f"more than {MAX_NODES} values once YAML aliases are expanded "
                                  "(refused: an alias bomb)")
        return loader.construct_document(root)
    finally:
        loader.dispose()
