# generated from profiles.yaml by `oespec generate`, do not edit
"""Profile combinations of registry revision 1, as data.

Do not edit: change profiles.yaml and run `oespec generate`. Limits, profile versions, scopes and
roles are read from the compiled descriptors at run time (`openengine.validate._tables`, through
`openengine.contract`); prerequisites and incompatible combinations are not in the descriptors,
so they are listed here and applied by the interpreter in `_tables`.
"""

REGISTRY_REVISION = 1

# (profile, required profile, ((operator, (major, minor)), ...), the range as text): the profile
# may only be advertised with a version of the required profile that satisfies every comparator.
REQUIRES = (
    ('openengine.load', 'openengine.core', (('>=', (1, 0)),), 'openengine.core >= 1.0'),
    ('openengine.kv', 'openengine.core', (('>=', (1, 0)),), 'openengine.core >= 1.0'),
    ('openengine.tasks', 'openengine.core', (('>=', (1, 0)),), 'openengine.core >= 1.0'),
    ('openengine.encoder', 'openengine.core', (('>=', (1, 0)),), 'openengine.core >= 1.0'),
    ('openengine.sessions', 'openengine.core', (('>=', (1, 0)),), 'openengine.core >= 1.0'),
    ('openengine.adapters', 'openengine.core', (('>=', (1, 0)),), 'openengine.core >= 1.0'),
    ('openengine.runtime-events', 'openengine.core', (('>=', (1, 0)),), 'openengine.core >= 1.0'),
    ('openengine.admin', 'openengine.core', (('>=', (1, 0)),), 'openengine.core >= 1.0'),
)

# (profiles that must all be advertised, ((profile, limit, operator, value), ...) on effective
# limit values, the field path reported, the message): a combination that must not be advertised.
INCOMPATIBLE = (
    (('openengine.core',), (('openengine.core', 'speculative_decoding', 'equals', True), ('openengine.core', 'pipeline_parallel_size', 'at_least', 2)),
     'generation.speculative_decoding',
     'openengine.core is incompatible when openengine.core.speculative_decoding == true and openengine.core.pipeline_parallel_size >= 2: SGLang and TensorRT-LLM reject speculative decoding together with pipeline parallelism.'),
    (('openengine.core',), (('openengine.core', 'speculative_decoding', 'equals', True), ('openengine.core', 'logit_bias', 'equals', True)),
     'generation.speculative_decoding',
     'openengine.core is incompatible when openengine.core.speculative_decoding == true and openengine.core.logit_bias == true: vLLM rejects logit_bias in sampling parameters when speculative decoding is enabled.'),
    (('openengine.core',), (('openengine.core', 'speculative_decoding', 'equals', True), ('openengine.core', 'min_p', 'equals', True)),
     'generation.speculative_decoding',
     'openengine.core is incompatible when openengine.core.speculative_decoding == true and openengine.core.min_p == true: vLLM rejects min_p sampling when speculative decoding is enabled.'),
    (('openengine.core',), (('openengine.core', 'speculative_decoding', 'equals', True), ('openengine.core', 'logits_post_processor', 'equals', True)),
     'generation.speculative_decoding',
     'openengine.core is incompatible when openengine.core.speculative_decoding == true and openengine.core.logits_post_processor == true: TensorRT-LLM does not run a logits post-processor together with speculative decoding.'),
    (('openengine.kv', 'openengine.core'), (('openengine.core', 'logits_post_processor', 'equals', True),),
     'generation.logits_post_processor',
     'openengine.kv with openengine.core is incompatible when openengine.core.logits_post_processor == true: TensorRT-LLM does not support a logits post-processor in disaggregated (context-only and generation-only) serving.'),
    (('openengine.tasks', 'openengine.core'), (('openengine.core', 'speculative_decoding', 'equals', True),),
     'generation.speculative_decoding',
     'openengine.tasks with openengine.core is incompatible when openengine.core.speculative_decoding == true: vLLM does not run pooling tasks when speculative decoding is enabled.'),
)
