// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// A Chainlink-style price feed (AggregatorV3Interface) whose answer the dev chain sets.
contract MockPriceFeed {
    uint8 public constant decimals = 8;
    string public constant description = "ETH / USD";
    uint80 private round;
    int256 private answer;
    uint256 private updatedAt;
    address public immutable owner;

    constructor(int256 answer_) {
        owner = msg.sender;
        _set(answer_, block.timestamp);
    }

    function setAnswer(int256 answer_, uint256 updatedAt_) external {
        require(msg.sender == owner, "only the owner");
        _set(answer_, updatedAt_);
    }

    function latestRoundData() external view returns (uint80, int256, uint256, uint256, uint80) {
        return (round, answer, updatedAt, updatedAt, round);
    }

    function _set(int256 answer_, uint256 updatedAt_) private {
        round += 1;
        answer = answer_;
        updatedAt = updatedAt_;
    }
}
