"""Architecture registry: `general.architecture` -> model class."""

from __future__ import annotations

from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.families.bert import BertModel, NomicBertModel
from llamacli.core.model.families.deepseek2 import DeepSeek2Model
from llamacli.core.model.families.gemma import GemmaModel
from llamacli.core.model.families.gemma2 import Gemma2Model
from llamacli.core.model.families.gemma3 import Gemma3Model
from llamacli.core.model.families.gemma4 import Gemma4Model
from llamacli.core.model.families.glm4moe import Glm4MoeModel
from llamacli.core.model.families.gptoss import GptOssModel
from llamacli.core.model.families.granite import GraniteModel, GraniteMoeModel
from llamacli.core.model.families.granitehybrid import GraniteHybridModel
from llamacli.core.model.families.lfm2 import Lfm2Model, Lfm2MoeModel
from llamacli.core.model.families.llama import LlamaModel
from llamacli.core.model.families.minimax_m2 import MinimaxM2Model
from llamacli.core.model.families.mistral3 import Mistral3Model
from llamacli.core.model.families.nemotronh import NemotronHModel, NemotronHMoeModel
from llamacli.core.model.families.olmoe import OlmoeModel
from llamacli.core.model.families.phi3 import Phi3Model
from llamacli.core.model.families.qwen2 import Qwen2Model
from llamacli.core.model.families.qwen2moe import Qwen2MoeModel
from llamacli.core.model.families.qwen2vl import Qwen2VLModel
from llamacli.core.model.families.qwen3 import Qwen3Model
from llamacli.core.model.families.qwen3moe import Qwen3MoeModel
from llamacli.core.model.families.qwen35 import Qwen3NextModel, Qwen35Model, Qwen35MoeModel
from llamacli.core.model.families.seed_oss import SeedOssModel
from llamacli.core.model.families.smollm3 import SmolLM3Model

ARCHITECTURES: dict[str, type[DecoderModel]] = {
    m.arch: m for m in (LlamaModel, Qwen2Model, Qwen3Model, Qwen3MoeModel, GptOssModel, Phi3Model, Gemma3Model, Mistral3Model,
                        Glm4MoeModel, GraniteHybridModel, BertModel, NomicBertModel, Qwen2VLModel, Qwen35Model,
                        Qwen35MoeModel, Qwen3NextModel, DeepSeek2Model, NemotronHModel,
                        NemotronHMoeModel, OlmoeModel, Qwen2MoeModel, Gemma2Model, GemmaModel,
                        SmolLM3Model, Lfm2Model, Lfm2MoeModel, GraniteModel, GraniteMoeModel,
                        MinimaxM2Model, SeedOssModel, Gemma4Model)
}
