# generated from profiles.yaml by `oespec generate`, do not edit
"""Validators of capability messages, generated from profiles.yaml (registry revision 2).

Do not edit: change profiles.yaml and run `oespec generate`. Every limit's default, range and
enum values, every profile's name, version and scope are inlined below, one function per profile, so validation interprets nothing at run time. The
functions work on protobuf messages (presence via HasField) and append to `out`; the public API
that calls them is in `openengine.validate`.
"""

from __future__ import annotations

import re

from openengine.validate._rules import violation as _v

REGISTRY_REVISION = 2

# Standard profile name -> (major, minor) the registry defines.
KNOWN_PROFILES = {
    'openengine.core': (1, 0),
    'openengine.load': (1, 0),
    'openengine.kv': (1, 0),
    'openengine.tasks': (1, 0),
    'openengine.encoder': (1, 0),
    'openengine.sessions': (1, 0),
    'openengine.adapters': (1, 0),
    'openengine.runtime-events': (1, 0),
    'openengine.admin': (1, 0),
}

# Standard profile name -> its field in Capabilities (profiles with a capability message only).
CAPABILITY_FIELDS = {
    'openengine.core': 'generation',
    'openengine.load': 'observability',
    'openengine.kv': 'kv',
    'openengine.tasks': 'tasks',
    'openengine.encoder': 'encoder',
    'openengine.sessions': 'sessions',
    'openengine.adapters': 'adapters',
    'openengine.runtime-events': 'runtime_events',
    'openengine.admin': 'admin',
}

# Model-scoped profiles: listed per model in ModelInfo.capabilities.
MODEL_SCOPED = frozenset({'openengine.tasks', 'openengine.adapters'})

# Role-scoped profiles -> the Role numbers that may advertise them.
ROLE_SCOPED = {
    'openengine.kv': (2, 3,),
    'openengine.encoder': (4,),
}
ROLE_NAMES = {
    'openengine.kv': ['prefill', 'decode'],
    'openengine.encoder': ['encoder'],
}

# Effective value of every limit when nothing is set (the registry defaults).
DEFAULTS = {
    'openengine.core': {
        'max_logprobs': 20,
        'max_sequences': 1,
        'speculative_decoding': False,
        'guided_decoding_modes': [],
        'logit_bias': False,
        'min_p': False,
        'prompt_logprobs': False,
        'token_ids_input': True,
        'priority': False,
        'max_running_requests': 256,
        'max_batch_tokens': 8192,
        'pipeline_parallel_size': 1,
        'logits_post_processor': False,
    },
    'openengine.load': {
        'min_watch_interval_ms': 10,
        'max_watch_interval_ms': 60000,
        'default_watch_interval_ms': 100,
        'default_heartbeat_ms': 1000,
        'max_watchers': 64,
        'per_rank': False,
        'change_driven': False,
    },
    'openengine.kv': {
        'kv_transfer_backends': [],
        'kv_block_size': 16,
        'total_kv_blocks': 0,
        'event_replay': False,
        'event_buffer_size': 0,
    },
    'openengine.tasks': {
        'supported_tasks': [],
        'max_inputs_per_request': 64,
        'embedding_size': 0,
        'matryoshka': False,
    },
    'openengine.encoder': {
        'modalities': [],
        'max_items_per_request': 16,
        'encoder_cache_tokens': 0,
        'handle_ttl_ms': 60000,
    },
    'openengine.sessions': {
        'max_sessions': 64,
        'default_session_ttl_ms': 600000,
        'max_session_ttl_ms': 3600000,
        'max_session_tokens': 0,
    },
    'openengine.adapters': {
        'max_loras': 1,
        'max_lora_rank': 16,
        'max_cpu_loras': 1,
    },
    'openengine.runtime-events': {
        'event_kinds': ['capability_revision_changed'],
        'max_subscribers': 64,
    },
    'openengine.admin': {
        'pause_modes': ['abort'],
        'max_sleep_level': 1,
        'wake_tags': [],
        'updatable_limits': [],
        'max_drain_deadline_ms': 600000,
    },
}

# Wire number -> registry value, for every enumerated limit.
_ENUM_GUIDEDDECODINGMODE = {1: 'json_schema', 2: 'json_object', 3: 'regex', 4: 'ebnf_grammar', 5: 'structural_tag', 6: 'choice'}
_ENUM_GUIDEDDECODINGMODE_TEXT = 'one of json_schema, json_object, regex, ebnf_grammar, structural_tag, choice'
_ENUM_TASKFAMILY = {1: 'embed', 2: 'classify', 3: 'score'}
_ENUM_TASKFAMILY_TEXT = 'one of embed, classify, score'
_ENUM_MODALITY = {1: 'image', 2: 'audio', 3: 'video'}
_ENUM_MODALITY_TEXT = 'one of image, audio, video'
_ENUM_RUNTIMEEVENTKIND = {1: 'capability_revision_changed', 2: 'state_changed', 3: 'adapter_loaded', 4: 'adapter_unloaded'}
_ENUM_RUNTIMEEVENTKIND_TEXT = 'one of capability_revision_changed, state_changed, adapter_loaded, adapter_unloaded'
_ENUM_PAUSEMODE = {1: 'abort', 2: 'wait', 3: 'keep'}
_ENUM_PAUSEMODE_TEXT = 'one of abort, wait, keep'


def limits_openengine_core(msg, path, out):
    """Effective limits of openengine.core from a GenerationCapabilities (None: every default)."""
    if msg is None:
        return {
            'max_logprobs': 20,
            'max_sequences': 1,
            'speculative_decoding': False,
            'guided_decoding_modes': [],
            'logit_bias': False,
            'min_p': False,
            'prompt_logprobs': False,
            'token_ids_input': True,
            'priority': False,
            'max_running_requests': 256,
            'max_batch_tokens': 8192,
            'pipeline_parallel_size': 1,
            'logits_post_processor': False,
        }
    has = msg.HasField
    eff = {}
    if has('max_logprobs'):
        v = msg.max_logprobs
        if v > 1024:
            out.append(_v('OEV111', path + ".max_logprobs", v, '0..1024', 'openengine.core.max_logprobs must be within 0..1024'))
        eff['max_logprobs'] = v
    else:
        eff['max_logprobs'] = 20
    if has('max_sequences'):
        v = msg.max_sequences
        if v < 1 or v > 1024:
            out.append(_v('OEV111', path + ".max_sequences", v, '1..1024', 'openengine.core.max_sequences must be within 1..1024'))
        eff['max_sequences'] = v
    else:
        eff['max_sequences'] = 1
    eff['speculative_decoding'] = msg.speculative_decoding if has('speculative_decoding') else False
    vs = msg.guided_decoding_modes
    if vs:
        names = []
        for i, v in enumerate(vs):
            name = _ENUM_GUIDEDDECODINGMODE.get(v)
            if name is None:
                out.append(_v("OEV112", f"{path}.guided_decoding_modes[{i}]", v, _ENUM_GUIDEDDECODINGMODE_TEXT,
                              "openengine.core.guided_decoding_modes holds a value the registry does not define"))
            else:
                names.append(name)
        eff['guided_decoding_modes'] = names
    else:
        eff['guided_decoding_modes'] = []
    eff['logit_bias'] = msg.logit_bias if has('logit_bias') else False
    eff['min_p'] = msg.min_p if has('min_p') else False
    eff['prompt_logprobs'] = msg.prompt_logprobs if has('prompt_logprobs') else False
    eff['token_ids_input'] = msg.token_ids_input if has('token_ids_input') else True
    eff['priority'] = msg.priority if has('priority') else False
    if has('max_running_requests'):
        v = msg.max_running_requests
        if v < 1 or v > 1048576:
            out.append(_v('OEV111', path + ".max_running_requests", v, '1..1048576', 'openengine.core.max_running_requests must be within 1..1048576'))
        eff['max_running_requests'] = v
    else:
        eff['max_running_requests'] = 256
    if has('max_batch_tokens'):
        v = msg.max_batch_tokens
        if v < 1 or v > 16777216:
            out.append(_v('OEV111', path + ".max_batch_tokens", v, '1..16777216', 'openengine.core.max_batch_tokens must be within 1..16777216'))
        eff['max_batch_tokens'] = v
    else:
        eff['max_batch_tokens'] = 8192
    if has('pipeline_parallel_size'):
        v = msg.pipeline_parallel_size
        if v < 1 or v > 1024:
            out.append(_v('OEV111', path + ".pipeline_parallel_size", v, '1..1024', 'openengine.core.pipeline_parallel_size must be within 1..1024'))
        eff['pipeline_parallel_size'] = v
    else:
        eff['pipeline_parallel_size'] = 1
    eff['logits_post_processor'] = msg.logits_post_processor if has('logits_post_processor') else False
    return eff


def limits_openengine_load(msg, path, out):
    """Effective limits of openengine.load from a ObservabilityCapabilities (None: every default)."""
    if msg is None:
        return {
            'min_watch_interval_ms': 10,
            'max_watch_interval_ms': 60000,
            'default_watch_interval_ms': 100,
            'default_heartbeat_ms': 1000,
            'max_watchers': 64,
            'per_rank': False,
            'change_driven': False,
        }
    has = msg.HasField
    eff = {}
    if has('min_watch_interval_ms'):
        v = msg.min_watch_interval_ms
        if v < 1 or v > 60000:
            out.append(_v('OEV111', path + ".min_watch_interval_ms", v, '1..60000', 'openengine.load.min_watch_interval_ms must be within 1..60000'))
        eff['min_watch_interval_ms'] = v
    else:
        eff['min_watch_interval_ms'] = 10
    if has('max_watch_interval_ms'):
        v = msg.max_watch_interval_ms
        if v < 1 or v > 3600000:
            out.append(_v('OEV111', path + ".max_watch_interval_ms", v, '1..3600000', 'openengine.load.max_watch_interval_ms must be within 1..3600000'))
        eff['max_watch_interval_ms'] = v
    else:
        eff['max_watch_interval_ms'] = 60000
    if has('default_watch_interval_ms'):
        v = msg.default_watch_interval_ms
        if v < 1 or v > 3600000:
            out.append(_v('OEV111', path + ".default_watch_interval_ms", v, '1..3600000', 'openengine.load.default_watch_interval_ms must be within 1..3600000'))
        eff['default_watch_interval_ms'] = v
    else:
        eff['default_watch_interval_ms'] = 100
    if has('default_heartbeat_ms'):
        v = msg.default_heartbeat_ms
        if v < 1 or v > 3600000:
            out.append(_v('OEV111', path + ".default_heartbeat_ms", v, '1..3600000', 'openengine.load.default_heartbeat_ms must be within 1..3600000'))
        eff['default_heartbeat_ms'] = v
    else:
        eff['default_heartbeat_ms'] = 1000
    if has('max_watchers'):
        v = msg.max_watchers
        if v < 1 or v > 65536:
            out.append(_v('OEV111', path + ".max_watchers", v, '1..65536', 'openengine.load.max_watchers must be within 1..65536'))
        eff['max_watchers'] = v
    else:
        eff['max_watchers'] = 64
    eff['per_rank'] = msg.per_rank if has('per_rank') else False
    eff['change_driven'] = msg.change_driven if has('change_driven') else False
    return eff


def limits_openengine_kv(msg, path, out):
    """Effective limits of openengine.kv from a KvCapabilities (None: every default)."""
    if msg is None:
        return {
            'kv_transfer_backends': [],
            'kv_block_size': 16,
            'total_kv_blocks': 0,
            'event_replay': False,
            'event_buffer_size': 0,
        }
    has = msg.HasField
    eff = {}
    vs = msg.kv_transfer_backends
    if vs:
        eff['kv_transfer_backends'] = list(vs)
    else:
        eff['kv_transfer_backends'] = []
    if has('kv_block_size'):
        v = msg.kv_block_size
        if v < 1 or v > 4096:
            out.append(_v('OEV111', path + ".kv_block_size", v, '1..4096', 'openengine.kv.kv_block_size must be within 1..4096'))
        eff['kv_block_size'] = v
    else:
        eff['kv_block_size'] = 16
    eff['total_kv_blocks'] = msg.total_kv_blocks if has('total_kv_blocks') else 0
    eff['event_replay'] = msg.event_replay if has('event_replay') else False
    eff['event_buffer_size'] = msg.event_buffer_size if has('event_buffer_size') else 0
    return eff


def limits_openengine_tasks(msg, path, out):
    """Effective limits of openengine.tasks from a TaskCapabilities (None: every default)."""
    if msg is None:
        return {
            'supported_tasks': [],
            'max_inputs_per_request': 64,
            'embedding_size': 0,
            'matryoshka': False,
        }
    has = msg.HasField
    eff = {}
    vs = msg.supported_tasks
    if vs:
        names = []
        for i, v in enumerate(vs):
            name = _ENUM_TASKFAMILY.get(v)
            if name is None:
                out.append(_v("OEV112", f"{path}.supported_tasks[{i}]", v, _ENUM_TASKFAMILY_TEXT,
                              "openengine.tasks.supported_tasks holds a value the registry does not define"))
            else:
                names.append(name)
        eff['supported_tasks'] = names
    else:
        eff['supported_tasks'] = []
    if has('max_inputs_per_request'):
        v = msg.max_inputs_per_request
        if v < 1 or v > 1048576:
            out.append(_v('OEV111', path + ".max_inputs_per_request", v, '1..1048576', 'openengine.tasks.max_inputs_per_request must be within 1..1048576'))
        eff['max_inputs_per_request'] = v
    else:
        eff['max_inputs_per_request'] = 64
    if has('embedding_size'):
        v = msg.embedding_size
        if v > 1048576:
            out.append(_v('OEV111', path + ".embedding_size", v, '0..1048576', 'openengine.tasks.embedding_size must be within 0..1048576'))
        eff['embedding_size'] = v
    else:
        eff['embedding_size'] = 0
    eff['matryoshka'] = msg.matryoshka if has('matryoshka') else False
    return eff


def limits_openengine_encoder(msg, path, out):
    """Effective limits of openengine.encoder from a EncoderCapabilities (None: every default)."""
    if msg is None:
        return {
            'modalities': [],
            'max_items_per_request': 16,
            'encoder_cache_tokens': 0,
            'handle_ttl_ms': 60000,
        }
    has = msg.HasField
    eff = {}
    vs = msg.modalities
    if vs:
        names = []
        for i, v in enumerate(vs):
            name = _ENUM_MODALITY.get(v)
            if name is None:
                out.append(_v("OEV112", f"{path}.modalities[{i}]", v, _ENUM_MODALITY_TEXT,
                              "openengine.encoder.modalities holds a value the registry does not define"))
            else:
                names.append(name)
        eff['modalities'] = names
    else:
        eff['modalities'] = []
    if has('max_items_per_request'):
        v = msg.max_items_per_request
        if v < 1 or v > 65536:
            out.append(_v('OEV111', path + ".max_items_per_request", v, '1..65536', 'openengine.encoder.max_items_per_request must be within 1..65536'))
        eff['max_items_per_request'] = v
    else:
        eff['max_items_per_request'] = 16
    eff['encoder_cache_tokens'] = msg.encoder_cache_tokens if has('encoder_cache_tokens') else 0
    if has('handle_ttl_ms'):
        v = msg.handle_ttl_ms
        if v < 1:
            out.append(_v('OEV111', path + ".handle_ttl_ms", v, '1..', 'openengine.encoder.handle_ttl_ms must be within 1..'))
        eff['handle_ttl_ms'] = v
    else:
        eff['handle_ttl_ms'] = 60000
    return eff


def limits_openengine_sessions(msg, path, out):
    """Effective limits of openengine.sessions from a SessionCapabilities (None: every default)."""
    if msg is None:
        return {
            'max_sessions': 64,
            'default_session_ttl_ms': 600000,
            'max_session_ttl_ms': 3600000,
            'max_session_tokens': 0,
        }
    has = msg.HasField
    eff = {}
    if has('max_sessions'):
        v = msg.max_sessions
        if v < 1 or v > 1048576:
            out.append(_v('OEV111', path + ".max_sessions", v, '1..1048576', 'openengine.sessions.max_sessions must be within 1..1048576'))
        eff['max_sessions'] = v
    else:
        eff['max_sessions'] = 64
    if has('default_session_ttl_ms'):
        v = msg.default_session_ttl_ms
        if v < 1:
            out.append(_v('OEV111', path + ".default_session_ttl_ms", v, '1..', 'openengine.sessions.default_session_ttl_ms must be within 1..'))
        eff['default_session_ttl_ms'] = v
    else:
        eff['default_session_ttl_ms'] = 600000
    if has('max_session_ttl_ms'):
        v = msg.max_session_ttl_ms
        if v < 1:
            out.append(_v('OEV111', path + ".max_session_ttl_ms", v, '1..', 'openengine.sessions.max_session_ttl_ms must be within 1..'))
        eff['max_session_ttl_ms'] = v
    else:
        eff['max_session_ttl_ms'] = 3600000
    eff['max_session_tokens'] = msg.max_session_tokens if has('max_session_tokens') else 0
    return eff


def limits_openengine_adapters(msg, path, out):
    """Effective limits of openengine.adapters from a AdapterCapabilities (None: every default)."""
    if msg is None:
        return {
            'max_loras': 1,
            'max_lora_rank': 16,
            'max_cpu_loras': 1,
        }
    has = msg.HasField
    eff = {}
    if has('max_loras'):
        v = msg.max_loras
        if v < 1 or v > 4096:
            out.append(_v('OEV111', path + ".max_loras", v, '1..4096', 'openengine.adapters.max_loras must be within 1..4096'))
        eff['max_loras'] = v
    else:
        eff['max_loras'] = 1
    if has('max_lora_rank'):
        v = msg.max_lora_rank
        if v < 1 or v > 512:
            out.append(_v('OEV111', path + ".max_lora_rank", v, '1..512', 'openengine.adapters.max_lora_rank must be within 1..512'))
        eff['max_lora_rank'] = v
    else:
        eff['max_lora_rank'] = 16
    if has('max_cpu_loras'):
        v = msg.max_cpu_loras
        if v < 1 or v > 65536:
            out.append(_v('OEV111', path + ".max_cpu_loras", v, '1..65536', 'openengine.adapters.max_cpu_loras must be within 1..65536'))
        eff['max_cpu_loras'] = v
    else:
        eff['max_cpu_loras'] = 1
    return eff


def limits_openengine_runtime_events(msg, path, out):
    """Effective limits of openengine.runtime-events from a RuntimeEventCapabilities (None: every default)."""
    if msg is None:
        return {
            'event_kinds': ['capability_revision_changed'],
            'max_subscribers': 64,
        }
    has = msg.HasField
    eff = {}
    vs = msg.event_kinds
    if vs:
        names = []
        for i, v in enumerate(vs):
            name = _ENUM_RUNTIMEEVENTKIND.get(v)
            if name is None:
                out.append(_v("OEV112", f"{path}.event_kinds[{i}]", v, _ENUM_RUNTIMEEVENTKIND_TEXT,
                              "openengine.runtime-events.event_kinds holds a value the registry does not define"))
            else:
                names.append(name)
        eff['event_kinds'] = names
    else:
        eff['event_kinds'] = ['capability_revision_changed']
    if has('max_subscribers'):
        v = msg.max_subscribers
        if v < 1 or v > 65536:
            out.append(_v('OEV111', path + ".max_subscribers", v, '1..65536', 'openengine.runtime-events.max_subscribers must be within 1..65536'))
        eff['max_subscribers'] = v
    else:
        eff['max_subscribers'] = 64
    return eff


def limits_openengine_admin(msg, path, out):
    """Effective limits of openengine.admin from a AdminCapabilities (None: every default)."""
    if msg is None:
        return {
            'pause_modes': ['abort'],
            'max_sleep_level': 1,
            'wake_tags': [],
            'updatable_limits': [],
            'max_drain_deadline_ms': 600000,
        }
    has = msg.HasField
    eff = {}
    vs = msg.pause_modes
    if vs:
        names = []
        for i, v in enumerate(vs):
            name = _ENUM_PAUSEMODE.get(v)
            if name is None:
                out.append(_v("OEV112", f"{path}.pause_modes[{i}]", v, _ENUM_PAUSEMODE_TEXT,
                              "openengine.admin.pause_modes holds a value the registry does not define"))
            else:
                names.append(name)
        eff['pause_modes'] = names
    else:
        eff['pause_modes'] = ['abort']
    if has('max_sleep_level'):
        v = msg.max_sleep_level
        if v < 1 or v > 8:
            out.append(_v('OEV111', path + ".max_sleep_level", v, '1..8', 'openengine.admin.max_sleep_level must be within 1..8'))
        eff['max_sleep_level'] = v
    else:
        eff['max_sleep_level'] = 1
    vs = msg.wake_tags
    if vs:
        eff['wake_tags'] = list(vs)
    else:
        eff['wake_tags'] = []
    vs = msg.updatable_limits
    if vs:
        eff['updatable_limits'] = list(vs)
    else:
        eff['updatable_limits'] = []
    if has('max_drain_deadline_ms'):
        v = msg.max_drain_deadline_ms
        if v < 1:
            out.append(_v('OEV111', path + ".max_drain_deadline_ms", v, '1..', 'openengine.admin.max_drain_deadline_ms must be within 1..'))
        eff['max_drain_deadline_ms'] = v
    else:
        eff['max_drain_deadline_ms'] = 600000
    return eff


def check_profiles(profiles, path, out):
    """Advertised profile name -> list of (major, minor), checking names, majors and duplicates."""
    adv = {}
    seen = set()
    for i, p in enumerate(profiles):
        name = p.name
        major = p.major
        minor = p.minor
        if not _canonical(name):
            out.append(_v("OEV102", f"{path}[{i}].name", name, "lower-case dotted name such as openengine.load",
                          "profile name is empty or not canonical"))
        if major < 1:
            out.append(_v("OEV103", f"{path}[{i}].major", major, ">= 1", "major version must be at least 1"))
        key = (name, major)
        if key in seen:
            out.append(_v("OEV104", f"{path}[{i}]", f"{name} {major}", "each (name, major) once",
                          f"{name} major {major} is advertised more than once"))
        seen.add(key)
        versions = adv.get(name)
        if versions is None:
            adv[name] = [(major, minor)]
        else:
            versions.append((major, minor))
        if name.startswith("openengine."):
            known = KNOWN_PROFILES.get(name)
            if known is None:
                out.append(_v("OEV105", f"{path}[{i}].name", name, "a profile of registry revision 2",
                              f"{name} is not a standard profile this validator knows (a typo, or a newer profile)"))
            elif major != known[0] and major >= 1:
                out.append(_v("OEV106", f"{path}[{i}].major", major, str(known[0]),
                              f"{name} has no major version {major} in the registry (known: {known[0]}.{known[1]})"))
    return adv


def check_capabilities(caps, out):
    """Judge a Capabilities message. Returns (advertised profiles, effective limits per profile)."""
    adv = check_profiles(caps.profiles, "profiles", out)
    if "openengine.core" not in adv:
        out.append(_v("OEV101", "profiles", None, "openengine.core", "openengine.core is not advertised"))
    has = caps.HasField
    if has('generation'):
        if 'openengine.core' not in adv:
            out.append(_v("OEV110", 'generation', None, "openengine.core in profiles",
                          "generation is set but openengine.core is not advertised"))
        e_openengine_core = limits_openengine_core(caps.generation, 'generation', out)
    else:
        e_openengine_core = limits_openengine_core(None, 'generation', out)
    if has('observability'):
        if 'openengine.load' not in adv:
            out.append(_v("OEV110", 'observability', None, "openengine.load in profiles",
                          "observability is set but openengine.load is not advertised"))
        e_openengine_load = limits_openengine_load(caps.observability, 'observability', out)
    else:
        e_openengine_load = limits_openengine_load(None, 'observability', out)
    if has('kv'):
        if 'openengine.kv' not in adv:
            out.append(_v("OEV110", 'kv', None, "openengine.kv in profiles",
                          "kv is set but openengine.kv is not advertised"))
        e_openengine_kv = limits_openengine_kv(caps.kv, 'kv', out)
    else:
        e_openengine_kv = limits_openengine_kv(None, 'kv', out)
    if has('tasks'):
        if 'openengine.tasks' not in adv:
            out.append(_v("OEV110", 'tasks', None, "openengine.tasks in profiles",
                          "tasks is set but openengine.tasks is not advertised"))
        e_openengine_tasks = limits_openengine_tasks(caps.tasks, 'tasks', out)
    else:
        e_openengine_tasks = limits_openengine_tasks(None, 'tasks', out)
    if has('encoder'):
        if 'openengine.encoder' not in adv:
            out.append(_v("OEV110", 'encoder', None, "openengine.encoder in profiles",
                          "encoder is set but openengine.encoder is not advertised"))
        e_openengine_encoder = limits_openengine_encoder(caps.encoder, 'encoder', out)
    else:
        e_openengine_encoder = limits_openengine_encoder(None, 'encoder', out)
    if has('sessions'):
        if 'openengine.sessions' not in adv:
            out.append(_v("OEV110", 'sessions', None, "openengine.sessions in profiles",
                          "sessions is set but openengine.sessions is not advertised"))
        e_openengine_sessions = limits_openengine_sessions(caps.sessions, 'sessions', out)
    else:
        e_openengine_sessions = limits_openengine_sessions(None, 'sessions', out)
    if has('adapters'):
        if 'openengine.adapters' not in adv:
            out.append(_v("OEV110", 'adapters', None, "openengine.adapters in profiles",
                          "adapters is set but openengine.adapters is not advertised"))
        e_openengine_adapters = limits_openengine_adapters(caps.adapters, 'adapters', out)
    else:
        e_openengine_adapters = limits_openengine_adapters(None, 'adapters', out)
    if has('runtime_events'):
        if 'openengine.runtime-events' not in adv:
            out.append(_v("OEV110", 'runtime_events', None, "openengine.runtime-events in profiles",
                          "runtime_events is set but openengine.runtime-events is not advertised"))
        e_openengine_runtime_events = limits_openengine_runtime_events(caps.runtime_events, 'runtime_events', out)
    else:
        e_openengine_runtime_events = limits_openengine_runtime_events(None, 'runtime_events', out)
    if has('admin'):
        if 'openengine.admin' not in adv:
            out.append(_v("OEV110", 'admin', None, "openengine.admin in profiles",
                          "admin is set but openengine.admin is not advertised"))
        e_openengine_admin = limits_openengine_admin(caps.admin, 'admin', out)
    else:
        e_openengine_admin = limits_openengine_admin(None, 'admin', out)
    return adv, {
        'openengine.core': e_openengine_core,
        'openengine.load': e_openengine_load,
        'openengine.kv': e_openengine_kv,
        'openengine.tasks': e_openengine_tasks,
        'openengine.encoder': e_openengine_encoder,
        'openengine.sessions': e_openengine_sessions,
        'openengine.adapters': e_openengine_adapters,
        'openengine.runtime-events': e_openengine_runtime_events,
        'openengine.admin': e_openengine_admin,
    }


def check_model_capabilities(mc, path, adv, out):
    """Judge one ModelInfo.capabilities against the engine's advertised profiles. Returns (profiles
    the model lists, effective limits of the model-scoped messages it sets)."""
    madv = check_profiles(mc.profiles, path + ".profiles", out)
    for i, p in enumerate(mc.profiles):
        name = p.name
        if name in KNOWN_PROFILES and name not in MODEL_SCOPED:
            out.append(_v("OEV133", f"{path}.profiles[{i}].name", name, "a model-scoped profile",
                          f"{name} is not model-scoped and belongs in Capabilities only"))
        if name not in adv:
            out.append(_v("OEV131", f"{path}.profiles[{i}].name", name, "also in Capabilities.profiles",
                          f"the model lists {name} but the engine does not advertise it"))
    has = mc.HasField
    eff = {}
    if has('tasks'):
        if 'openengine.tasks' not in madv:
            out.append(_v("OEV132", path + ".tasks", None, "openengine.tasks in the model's profiles",
                          "tasks is set but the model does not list openengine.tasks"))
        eff['openengine.tasks'] = limits_openengine_tasks(mc.tasks, path + ".tasks", out)
    if has('adapters'):
        if 'openengine.adapters' not in madv:
            out.append(_v("OEV132", path + ".adapters", None, "openengine.adapters in the model's profiles",
                          "adapters is set but the model does not list openengine.adapters"))
        eff['openengine.adapters'] = limits_openengine_adapters(mc.adapters, path + ".adapters", out)
    return madv, eff


def check_role(adv, role, role_name, out):
    """Role-scoped profiles advertised by an engine whose EngineInfo.role does not allow them."""
    if 'openengine.kv' in adv and role not in (2, 3,):
        out.append(_v("OEV130", "profiles", role_name, 'role prefill or decode',
                      "openengine.kv is advertised by an engine whose role is " + role_name))
    if 'openengine.encoder' in adv and role not in (4,):
        out.append(_v("OEV130", "profiles", role_name, 'role encoder',
                      "openengine.encoder is advertised by an engine whose role is " + role_name))
    return None


_CANONICAL = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?:\.[a-z][a-z0-9]*(?:-[a-z0-9]+)*)+$")


def _canonical(name, _match=_CANONICAL.match):
    return _match(name) is not None
