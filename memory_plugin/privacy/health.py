"""Health data is kept only as a non-clinical note, never as clinical detail.

The rule, applied to every fact before it is stored (`memory_plugin.privacy.sanitize_fact_text`):

1. A fact is *clinical* when it names a diagnosis ("diabetes", "epilepsia", "diagnosed with…"), a medication
   (a drug name, or a dose such as "850 mg"), or a test result ("glucosa 180", "HbA1c 7,2 %", "tested
   positive").
2. A clinical fact that also says what the condition changes for the service (shifts, schedule, travel,
   meetings, deliveries, physical work, availability) is replaced by a fixed note in the fact's language:
   "Tiene una condición médica que afecta a los turnos" / "Has a medical condition that affects shifts",
   category `health_note`. Nothing of the diagnosis, drug, dose or result survives.
3. A clinical fact that says nothing useful for the service is dropped (and counted).
4. A non-clinical health note ("Prefiere no viajar por motivos de salud") is kept as it is.

Machining vocabulary that looks medical is not clinical: "tratamiento térmico", "presión de trabajo",
"prueba de dureza 58 HRC", "inspección por rayos X", "stroke length", "análisis dimensional".
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from ..text import strip_marks
from .patterns import by_first_char, split_alternatives

__all__ = [
    "CLINICAL_TERM",
    "CLINICAL_TERM_FEW_LETTERS",
    "CLINICAL_TERM_KINDS",
    "DIAGNOSIS",
    "DOSE",
    "MEDICATION",
    "TEST_RESULT",
    "HealthScreen",
    "looks_spanish",
    "screen_health",
]


@dataclass(frozen=True, slots=True)
class HealthScreen:
    """What `screen_health` found in a text."""

    clinical: tuple[str, ...]
    """Kinds of clinical detail found, each once: "diagnosis", "medication", "test_result". Empty: none."""
    note: str | None
    """For clinical text: the non-clinical note to store instead, or None when it must be dropped. For
    non-clinical text: None (keep the text as it is)."""


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return strip_marks(decomposed).lower()


# Matched on the folded text (lower case, no accents). Whole words, with stems where Spanish and English
# inflect ("diabet" covers diabetes, diabético, diabetic).
_DIAGNOSIS_WORDS = (
    r"(?:diabet\w*|prediabet\w*|epilep\w*|cancer|tumou?r\w*|leucemia|leuka?emia|depresion|depression|depresiv\w*|depressive"
    r"|trastorno|disorder|bipolar|esquizofreni\w*|schizophreni\w*|vih|hiv|sida|asma|asthma\w*|hipertens\w*"
    r"|hypertens\w*|esclerosis|sclerosis|parkinson\w*|alzheimer\w*|artritis|arthritis|migran\w*|migraine\w*"
    r"|tdah|adhd|autis\w*|hepatitis|epoc|copd|insuficiencia\s+renal|kidney\s+failure|renal\s+failure|apnea"
    r"|apnoea|crohn\w*|celiac\w*|celiaqu\w*|infarto|heart\s+attack|ictus|(?:had|suffered)\s+a\s+(?:\w+\s+)?stroke|covid\w*"
    r"|embarazad\w*|embarazo|pregnan\w*|quimioterapia|chemotherapy|chemo|dialisis|dialysis|cirugia|surgery"
    r"|hernia\w*|diagnosticad\w*|diagnosed|diagnostico\s+de|diagnosis\s+of|lupus|fibromialgia|fibromyalgia"
    r"|anemia|anaemia|psoriasis|anorexia|bulimia|tuberculosis"
    # Further conditions, injuries and procedures people state of themselves in chat.
    r"|linfoma\w*|lymphoma\w*|melanoma\w*|carcinoma\w*|sarcoma\w*|metasta\w*|anxiety\s+disorder|panic\s+attacks?"
    r"|ataques?\s+de\s+panico|insomni\w*|hipotiroid\w*|hypothyroid\w*|hipertiroid\w*|hyperthyroid\w*|thyroid"
    r"|tiroides|neumonia|pneumonia|bronquitis|bronchitis|influenza|flu|(?:la|con|tengo)\s+gripe"
    r"|(?:kidney|urinary|ear|chest|sinus|throat|bladder|lung)\s+infection|uti"
    r"|infeccion\s+de\s+(?:orina|oido|garganta|pulmon|rinon)|menisc\w*|ligament\w*|(?:a|una|my|mi)\s+fractur\w*"
    r"|fractured|broke\s+my\s+(?:wrist|arm|leg|ankle|foot|hand|hip|collarbone|rib|finger|toe|nose|back)"
    r"|rompi\s+(?:la|el)\s+(?:muneca|brazo|pierna|tobillo|pie|mano|cadera|clavicula|costilla|dedo|nariz)"
    r"|escayola|polyps?|polipos?|gallbladder|vesicula|kidney\s+stones?|calculos?\s+renal\w*"
    r"|piedras?\s+en\s+el\s+rinon|pacemaker|marcapasos|wisdom\s+teeth|muelas?\s+del\s+juicio|ivf|fiv"
    r"|fertility\s+treatment|tratamiento\s+de\s+fertilidad|in\s+vitro|hospitali[sz]ed|hospitalizad\w*"
    r"|me\s+ingresaron|estuve\s+ingresad[oa]|admitted\s+to\s+(?:the\s+)?hospital"
    r"|me\s+(?:operan|operaron|van\s+a\s+operar|han\s+operado|tienen\s+que\s+operar)|operad[oa]\s+de|operarme"
    r"|intervencion\s+quirurgica|(?:hip|knee|shoulder)\s+replacement|protesis\s+de\s+(?:cadera|rodilla|hombro)"
    r"|transplant\w*|trasplante\w*|radiotherap\w*|radioterapia|radiation\s+therapy|quimio|physiotherap\w*|physio"
    r"|fisioterap\w*|fisio|colonoscop\w*|endoscop\w*|gastroscop\w*|mammogram\w*|mamografia|mri"
    r"|resonancia\s+magnetica|(?:hacen|hicieron|hacerme)\s+una\s+resonancia|in\s+therapy|en\s+terapia|therapist"
    r"|terapeuta|psychiatrist|psiquiatra|psicolog[oa]|psychologist|cpap|my\s+stroke|dementia|demencia|glaucoma"
    r"|cataracts?|cataratas|tinnitus|acufenos|endometriosis|infertili\w*|miscarriage|aborto\s+espontaneo"
    r"|arrhythmia|arritmia|cardiopatia|cirrhosis|cirrosis|pancreatitis|gastritis|ulcers?|ulcera|colitis|sciatica"
    r"|ciatica|tendinitis|tendonitis|dyslexia|dislexia|ptsd|ocd|eating\s+disorder|herpes)"
)
_MEDICATION_WORDS = (
    r"(?:metformin\w*|insulin\w*|ibuprofen\w*|aspirin[as]?|amoxicilina|amoxicillin|antibiotic\w*|paracetamol"
    r"|acetaminophen|omeprazol\w*|sertralin\w*"
    r"|fluoxetin\w*|prozac|lorazepam|diazepam|alprazolam|xanax|levotiroxin\w*|levothyroxin\w*|eutirox"
    r"|atorvastatin\w*|simvastatin\w*|enalapril|losartan|warfarin\w*|sintrom|adalimumab|metotrexato"
    r"|methotrexate|predniso\w*|cortisona|cortisone|antidepresiv\w*|antidepressant\w*|ansiolitic\w*"
    r"|anxiolytic\w*|morfina|morphine|tramadol|opioid\w*|opiace\w*|adderall|ritalin|metilfenidato"
    r"|methylphenidate"
    # Further medicines and devices: antidepressants, anticonvulsants, sleep, migraine, heart, asthma, hormones.
    r"|escitalopram|citalopram|lexapro|zoloft|wellbutrin|bupropion|venlafaxin\w*|duloxetin\w*|quetiapin\w*|seroquel"
    r"|olanzapin\w*|risperidon\w*|trazodon\w*|lithium|ozempic|wegovy|semaglutid\w*|mounjaro|levetiracetam|keppra"
    r"|lamotrigin\w*|valproat\w*|depakine|gabapentin\w*|pregabalin\w*|lyrica|clonazepam|rivotril|trankimazin"
    r"|orfidal|lormetazepam|zolpidem|stilnox|sumatript\w*|triptan\w*|statins?|estatinas?|rosuvastatin\w*"
    r"|anticoagula\w*|bisoprolol|amlodipin\w*|ramipril|penicilin\w*|penicillin\w*|ventolin|salbutamol|symbicort"
    r"|budesonid\w*|antihistamin\w*|loratadin\w*|cetirizin\w*|montelukast|hormone\s+therapy|terapia\s+hormonal"
    r"|tamoxifen\w*|contracepti\w*|anticonceptiv\w*|epipen|inhaler\w*|inhalador\w*|medication|medicacion|meds"
    r"|pastillas?\s+para\s+(?:la|el|los|las|dormir|dolor)|(?:pills|meds|tablets)\s+for\s+(?:my|the)"
    r"|blood\s+pressure\s+(?:pills|meds|medication|tablets)|insulin\s+pump|bomba\s+de\s+insulina)"
)
# A dose: digits and a mass unit in lower case ("850 mg", "0,5 mcg"); "Mg" (magnesium in an alloy) is not one.
# Written digit first (the look-behind checks the character before it), so the engine skips to the next digit
# instead of trying a match at every position (20,000 characters of prose: 0.01 ms instead of 0.5).
DOSE = re.compile(r"\d(?<![\w.,]\d)\d*(?:[.,]\d+)?\s?(?:mg|mcg|µg|ug)(?:/d[ií]a|/day|/dl)?\b")
_LAB_TERM = (
    r"(?:glucosa|glucose|glucemia|azucar\s+en\s+sangre|blood\s+sugar|hba1c|a1c|hemoglobina\s+glicosilada|colesterol"
    r"|cholesterol|trigliceridos|triglycerides|tension\s+arterial|presion\s+arterial|blood\s+pressure|creatinina"
    r"|creatinine|psa|tsh|analitica|analisis\s+de\s+sangre|blood\s+test|biopsia|biopsy|electrocardiograma|ecg|ekg"
    r"|pcr|test\s+de\s+covid|covid\s+test|prueba\s+de\s+covid)"
)
# A lab term with a value or a verdict close after it ("glucosa 180", "colesterol alto", "biopsia positiva"),
# or a result stated of the person ("dio positivo", "tested positive").
_TEST_RESULT_FORMS = (
    r"(?:" + _LAB_TERM + r"\b[^.;\n]{0,25}?(?:\d|\b(?:positiv\w*|negativ\w*|alt[oa]s?|baj[oa]s?|high|low"
    r"|elevad\w*|elevated|normal)\b)"
    r"|(?:di|di[oó]|dado|dio|tested|came\s+back)\s+(?:positivo|negativo|positive|negative)\b"
    r"|mg/dl\b|mmol/l\b)"
)
# Each kind's branches, grouped by first character (`patterns.by_first_char`: ~3x faster on 20,000 characters,
# same matches). Results first, so "covid test … positive" is a result rather than the word "covid".
_TEST_RESULT_BRANCHES = split_alternatives(_TEST_RESULT_FORMS[3:-1])
_DIAGNOSIS_BRANCHES = [branch + r"\b" for branch in split_alternatives(_DIAGNOSIS_WORDS[3:-1])]
_MEDICATION_BRANCHES = [branch + r"\b" for branch in split_alternatives(_MEDICATION_WORDS[3:-1])]
DIAGNOSIS = re.compile(r"(?<!\w)" + by_first_char(_DIAGNOSIS_BRANCHES)[0])
MEDICATION = re.compile(r"(?<!\w)" + by_first_char(_MEDICATION_BRANCHES)[0])
TEST_RESULT = re.compile(r"(?<!\w)" + by_first_char(_TEST_RESULT_BRANCHES)[0])
# All three in one scan, for text that is searched for every clinical term: each branch ends with an empty
# group, and `CLINICAL_TERM_KINDS[match.lastindex - 1]` names the kind of the branch that matched.
_CLINICAL_BRANCHES = [
    *[(branch, "test_result") for branch in _TEST_RESULT_BRANCHES],
    *[(branch, "diagnosis") for branch in _DIAGNOSIS_BRANCHES],
    *[(branch, "medication") for branch in _MEDICATION_BRANCHES],
]
_CLINICAL_ALTERNATION, _CLINICAL_ORDER = by_first_char([branch for branch, _ in _CLINICAL_BRANCHES], capture=True)
CLINICAL_TERM = re.compile(r"(?<!\w)" + _CLINICAL_ALTERNATION)
CLINICAL_TERM_KINDS: tuple[str, ...] = tuple(_CLINICAL_BRANCHES[index][1] for index in _CLINICAL_ORDER)
# The same matches with the look-behind after each first letter: the pattern then starts with a set of letters
# and the engine skips other characters in C. Faster on text that is mostly not letters (20,000 characters of
# digit groups: 0.15 ms instead of 0.7), slower on prose (1.1 ms instead of 0.7), where almost every letter
# starts some branch.
CLINICAL_TERM_FEW_LETTERS = re.compile(
    by_first_char([branch for branch, _ in _CLINICAL_BRANCHES], capture=True, after_first=r"(?<!\w.)")[0]
)

# What a condition changes for a machining shop's service: the only part of a clinical fact worth a note.
_CONSEQUENCES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"\b(?:turnos?|shifts?)\b"), "los turnos", "shifts"),
    (re.compile(r"\b(?:horarios?|jornada|schedule|working\s+hours)\b"), "el horario", "their schedule"),
    (re.compile(r"\b(?:viaj\w*|desplaz\w*|travel\w*|trips?)\b"), "los viajes", "travel"),
    (re.compile(r"\b(?:reuniones|reunion|llamadas|meetings?|calls?)\b"), "las reuniones", "meetings"),
    (
        re.compile(r"\b(?:entregas?|recogidas?|recoger|deliver\w*|pick\s*-?\s*ups?|collect\w*)\b"),
        "las entregas",
        "deliveries",
    ),
    (
        re.compile(r"\b(?:levantar|cargar\s+peso|esfuerzo\s+fisico|trabajo\s+fisico|lift\w*|heavy|physical\s+work)\b"),
        "el trabajo físico",
        "physical work",
    ),
    (
        re.compile(r"\b(?:disponibilidad|ausencias?|de\s+baja|availability|absences?|sick\s+leave|time\s+off)\b"),
        "la disponibilidad",
        "availability",
    ),
)

# Function words grouped by first character (`patterns.by_first_char`): the same counts in half the time.
_SPANISH_WORDS = (
    r"el|la|los|las|de|del|que|y|en|por|para|con|tiene|tengo|es|est[aá]|una?|su|sus|mi|no"
    r"|estoy|tomo|desde|cada|pero|muy|hace|ayer|hoy|han|al|como|ya|sin|porque|esto|esta|este|hay|son|fue|era"
    r"|todo|nada|vale|gracias|hola"
)
_SPANISH_HINT = re.compile(
    r"[ñáéíóú¿¡]|\b" + by_first_char(split_alternatives(_SPANISH_WORDS))[0] + r"\b", re.IGNORECASE
)
_ENGLISH_WORDS = r"the|and|of|to|in|has|have|is|are|with|for|on|my|our|their|a|an|not|it"
_ENGLISH_HINT = re.compile(r"\b" + by_first_char(split_alternatives(_ENGLISH_WORDS))[0] + r"\b", re.IGNORECASE)


def looks_spanish(text: str) -> bool:
    """Whether `text` reads as Spanish rather than English (counts common function words and accents)."""
    return len(_SPANISH_HINT.findall(text)) > len(_ENGLISH_HINT.findall(text))


def _join(parts: list[str], conjunction: str) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" {conjunction} " + parts[-1]


def screen_health(text: str) -> HealthScreen:
    """Find clinical details in `text` and, if there are any, the non-clinical note that may replace it."""
    folded = _fold(text)
    kinds: list[str] = []
    if DIAGNOSIS.search(folded):
        kinds.append("diagnosis")
    if MEDICATION.search(folded) or DOSE.search(text):
        kinds.append("medication")
    if TEST_RESULT.search(folded):
        kinds.append("test_result")
    if not kinds:
        return HealthScreen(clinical=(), note=None)
    spanish = looks_spanish(text)
    affected = [es if spanish else en for pattern, es, en in _CONSEQUENCES if pattern.search(folded)]
    if not affected:
        return HealthScreen(clinical=tuple(kinds), note=None)
    if spanish:
        targets = _join([f"a {a}".replace("a el ", "al ") for a in affected], "y")
        note = f"Tiene una condición médica que afecta {targets}"
    else:
        note = f"Has a medical condition that affects {_join(affected, 'and')}"
    return HealthScreen(clinical=tuple(kinds), note=note)
