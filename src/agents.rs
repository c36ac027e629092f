//! The agents Lazaret knows by name (decisions.md D12): each one's image
//! recipe in `assets/agents/NAME/`, compiled in, and how its images are
//! named. `engine::images` builds them; a profile's `agent = NAME` picks one.

/// Repository prefix of agent images: `localhost/lazaret/agent-NAME:VERSION`.
pub const AGENT_REPOSITORY: &str = "localhost/lazaret/agent-";
/// Where an agent image records its agent's version (written by the recipe).
pub const AGENT_VERSION_FILE: &str = "/etc/lazaret/agent-version";

/// A recipe in `assets/agents/NAME/` (decisions.md D12), compiled in.
#[derive(Debug, Clone, Copy)]
pub struct AgentRecipe {
    pub name: &'static str,
    pub containerfile: &'static str,
    /// The Debian release of the base image it builds FROM.
    pub release: &'static str,
}

pub const AGENT_RECIPES: &[AgentRecipe] = &[
    AgentRecipe {
        name: "claude",
        containerfile: include_str!("../assets/agents/claude/Containerfile"),
        release: "trixie",
    },
    AgentRecipe {
        name: "codex",
        containerfile: include_str!("../assets/agents/codex/Containerfile"),
        release: "trixie",
    },
    AgentRecipe {
        name: "aider",
        containerfile: include_str!("../assets/agents/aider/Containerfile"),
        // aider needs Python < 3.13: bookworm's 3.11 (trixie ships 3.13).
        release: "bookworm",
    },
];

/// The instruction file every agent image carries, pointing at the guide.
pub const AGENT_INSTRUCTIONS: &str = include_str!("../assets/agents/instructions.md");

pub fn agent_recipe(name: &str) -> Option<&'static AgentRecipe> {
    AGENT_RECIPES.iter().find(|r| r.name == name)
}

pub fn agent_names() -> Vec<&'static str> {
    AGENT_RECIPES.iter().map(|r| r.name).collect()
}

/// The image a profile with `agent = NAME` runs by default.
pub fn agent_image(name: &str) -> String {
    format!("{AGENT_REPOSITORY}{name}:latest")
}

/// The agent an image name belongs to, if it is an agent image.
pub fn agent_of_image(image: &str) -> Option<&str> {
    let rest = image.strip_prefix(AGENT_REPOSITORY)?;
    Some(rest.split(':').next().unwrap_or(rest))
}

/// Digest of what an agent image is built from (its recipe and the
/// instruction file), carried in the image's `lazaret.recipe` label so a
/// cached image can be told from one an older recipe made.
pub fn agent_recipe_digest(name: &str) -> Option<String> {
    use sha2::{Digest, Sha256};
    let recipe = agent_recipe(name)?;
    let mut h = Sha256::new();
    h.update(recipe.containerfile.as_bytes());
    h.update([0]);
    h.update(AGENT_INSTRUCTIONS.as_bytes());
    Some(hex::encode(&h.finalize()[..8]))
}
